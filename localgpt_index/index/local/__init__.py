"""The local backend: an index in a folder of this machine (index/local/)."""
