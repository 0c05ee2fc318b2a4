"""The models: finding one, its family and loader, the encoders build and query call, the device and precision."""
