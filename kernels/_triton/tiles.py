"""Program order over output tiles, shared by the GEMM-shaped Triton kernels (matmul, the triangle's two
roads, the MLP block's fused GEMM)."""
import triton
import triton.language as tl


@triton.jit
def grouped_tile(pid, tiles_m, tiles_n, GROUP: tl.constexpr):
    """(tile row, tile column) of program ``pid`` in grouped order: programs pid, pid + 1, ... go down a
    column of GROUP tiles before moving right, so the programs running at once read GROUP row panels
    of the first operand and a few column panels of the second (which stay in L2), not all of them."""
    per_group = GROUP * tiles_n
    first = (pid // per_group) * GROUP
    group = min(tiles_m - first, GROUP)  # the last group may be shorter
    return first + (pid % per_group) % group, (pid % per_group) // group
