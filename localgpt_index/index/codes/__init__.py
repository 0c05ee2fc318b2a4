"""Binary codes for a first pass that pays (issue 28): one bit a dimension (the sign), packed, scored
with popcount hamming MaxSim over every page by compiled code, the best candidates then rescored
exactly (index.score.maxsim). pack: the codes; kernel: the hamming MaxSim; first_pass: the two passes."""

from .first_pass import SegmentCodes, first_pass, two_pass
from .kernel import hamming_maxsim, kernel_name
from .pack import code_bytes, pack_codes, query_words

__all__ = ["SegmentCodes", "code_bytes", "first_pass", "hamming_maxsim", "kernel_name", "pack_codes",
           "query_words", "two_pass"]
