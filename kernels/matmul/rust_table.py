"""The Rust kernels of matmul: one entry per PTX kernel, the one place its name, parameters, launch
bounds and geometry are written (fields: kernels/_rust/table.py). Plain data, no imports."""
_MATMUL_PARAMS = ["A: *const f32", "B: *const f32", "C: *mut f32", "M: u32", "K: u32", "N: u32"]
_MATMUL_LENGTHS = {"A": "m * k", "B": "k * n", "C": "m * n"}

KERNELS = [
    {"name": "matmul_scalar", "call": "matmul_scalar", "params": _MATMUL_PARAMS, "threads": 256,
     "blocks_per_sm": 1, "lengths": _MATMUL_LENGTHS, "work": "m * n", "require": [],
     "geometry": "launch::matmul(m, n, false)"},
    {"name": "matmul", "call": "matmul", "params": _MATMUL_PARAMS, "threads": 256, "blocks_per_sm": 1,
     "lengths": _MATMUL_LENGTHS, "work": "m * n", "require": [], "geometry": "launch::matmul(m, n, true)"},
    # the same kernel with a register budget for two blocks per SM
    {"name": "matmul_2cta", "call": "matmul", "params": _MATMUL_PARAMS, "threads": 256, "blocks_per_sm": 2,
     "lengths": _MATMUL_LENGTHS, "work": "m * n", "require": [], "geometry": "launch::matmul(m, n, true)"},
    # 16-deep slices: half the barriers, twice the loads in flight
    {"name": "matmul_k16", "call": "matmul_k16", "params": _MATMUL_PARAMS, "threads": 256, "blocks_per_sm": 1,
     "lengths": _MATMUL_LENGTHS, "work": "m * n", "require": [], "geometry": "launch::matmul(m, n, true)"},
    # FP32 accuracy on the tensor cores (precision fp32x3): the same 128 x 128 tile and block of 256;
    # the operands split by cvt.rna.tf32.f32, or by integer operations (the same products)
    {"name": "matmul_fp32x3", "call": "matmul_fp32x3::<true>", "params": _MATMUL_PARAMS, "threads": 256,
     "blocks_per_sm": 1, "lengths": _MATMUL_LENGTHS, "work": "m * n", "require": [],
     "geometry": "launch::matmul(m, n, true)"},
    {"name": "matmul_fp32x3_bits", "call": "matmul_fp32x3::<false>", "params": _MATMUL_PARAMS, "threads": 256,
     "blocks_per_sm": 1, "lengths": _MATMUL_LENGTHS, "work": "m * n", "require": [],
     "geometry": "launch::matmul(m, n, true)"},
]
