"""Binary codes for a first pass that pays (issue 28), the best candidates then rescored exactly.

Per vector a centroid id and the sign of its residual, one bit a dimension, scored as estimated
MaxSim (a table lookup and a popcount) over every page by compiled code, the best candidates then
rescored exactly (index.scoring.maxsim). pack: the codes; kernel: the estimated MaxSim; first_pass:
the two passes; artifact: how segments keep them."""

from .first_pass import SegmentCodes, first_pass, two_pass
from .kernel import estimate_maxsim, hamming_maxsim, kernel_name
from .pack import code_bytes, pack_codes, query_words

__all__ = ["SegmentCodes", "code_bytes", "estimate_maxsim", "first_pass", "hamming_maxsim", "kernel_name", "pack_codes",
           "query_words", "two_pass"]
