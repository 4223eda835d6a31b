"""The Rust kernels of triangle: name, parameters, launch bounds and geometry of each, written once
(fields: kernels/_rust/table.py). Plain data, no imports."""
_PARAMS = ["A: *const f32", "B: *const f32", "O: *mut f32", "N: u32", "C: u32"]
_LENGTHS = {"A": "n * n * c", "B": "n * n * c", "O": "n * n * c"}

KERNELS = [
    # 64 x 64 (i, j) tiles of 512 threads
    {"name": "triangle", "call": "triangle::<64>", "params": _PARAMS, "threads": 512, "blocks_per_sm": 1,
     "lengths": _LENGTHS, "work": "n * n * c", "require": [], "geometry": "launch::triangle(n, c, true)"},
    # 64 x 32 tiles of 256 threads
    {"name": "triangle_256", "call": "triangle::<32>", "params": _PARAMS, "threads": 256, "blocks_per_sm": 1,
     "lengths": _LENGTHS, "work": "n * n * c", "require": [], "geometry": "launch::triangle(n, c, false)"},
]
