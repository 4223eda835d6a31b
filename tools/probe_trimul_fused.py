"""A development probe of the triangle update's fused bf16 road on one GPU: its TMA configs at N = 1,024
(C = H = 128), each with the last kernel's pairs, chunk or warps varied, kernel time per kernel from one
profile of 10 calls, each config checked against float64 at N = 96 (heavy-tailed) first:

    python3 tools/probe_trimul_fused.py          # from the repository root; prints one line a variant
    python3 tools/probe_trimul_fused.py NAME ... # those bf16 configs as they are (no variations);
                                                 # NAME+IN_H=64,IN_WARPS=8: the config with those keys changed
    ncu ... python3 tools/probe_trimul_fused.py --bare NAME  # NAME's calls alone, for a profiler: no check,
                                                             # no torch profiler, 4 calls (the first compiles)
    python3 tools/probe_trimul_fused.py fp32:NAME ...       # an FP32 config (the FP32 table's), checked at FP32
    python3 tools/probe_trimul_fused.py --n=256 NAME ...    # timed at N = 256 instead
    python3 tools/probe_trimul_fused.py --task fp32:NAME ... # the task's form (kernels/trimul_gpumode), D = H = 128

Not the record (that is ``mage measure``); data/h200/fused/probe2.txt is its output of 2026-12-05."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root: kernels, mage
import kernels.trimul_block.triton_block as tb  # noqa: E402
import kernels.trimul_gpumode.triton_block as tg  # noqa: E402

OP, SHAPE = "trimul_block", dict(C=128, H=128)


def _config(arg: str) -> tuple:
    """(dtype, a table config by name, with 'KEY=VALUE' overrides after a '+' (integers, True/False, or words));
    a name after 'fp32:' is the FP32 table's."""
    dtype, _, arg = arg.rpartition(":")
    dtype = dtype or "bf16"
    name, _, over = arg.partition("+")
    vals = {"True": True, "False": False}
    kv = [o.split("=") for o in over.split(",") if o]
    tiles = (tb if OP == "trimul_block" else tg).TILES[dtype]
    return dtype, dict(tiles[name], **{k: vals.get(v, int(v) if v.lstrip("-").isdigit() else v)
                                       for k, v in kv})


def main(argv):
    from mage import ops, registry
    from mage.check import check
    from mage.profile import profile

    global OP, SHAPE
    size = 1024
    if argv[:1] == ["--task"]:
        OP, SHAPE, argv = "trimul_gpumode", dict(B=1, D=128, H=128, nomask=0), argv[1:]
    if argv[:1] and argv[0].startswith("--n="):
        size, argv = int(argv[0][4:]), argv[1:]

    def inputs(dtype):
        impl = registry.get(OP, "triton", dtype)
        got = ops.OPS[OP].inputs(dict(SHAPE, N=size), seed=1, dtype=dtype, device="cuda")
        return impl.prepare(*got) if impl.prepare else got
    if argv[:1] == ["--bare"]:
        dtype, cfg = _config(argv[1])
        v, args = registry.get(OP, "triton", dtype).variant(**cfg), inputs(dtype)
        for _ in range(4):
            v.fn(*args)
        return
    names = argv or ["fused_r64_h32_tma_cublas", "fused_r64_h32_tma2_cublas", "fused_r64_h32_tma3_cublas"]
    for n in names:
        dtype, cfg = _config(n)
        args = inputs(dtype)
        for over in ({}, dict(FIN_R=64), dict(FIN_C=32), dict(FIN_WARPS=8))[:1 if argv else 4]:
            v = registry.get(OP, "triton", dtype).variant(**dict(cfg, **over))
            r = check(v, dict(SHAPE, N=96), trials=1, device="cuda", dist="heavy")
            p = profile(lambda: v.fn(*args), iters=10)
            print(n, over, r.passed, f"{p.kernel_us:.1f}", p.launches,
                  {k[:12]: round(u, 1) for k, u in p.kernel_us_by_name.items()}, flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
