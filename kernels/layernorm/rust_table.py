"""The Rust kernel of layernorm: its name, parameters, launch bounds and geometry, written once (fields:
kernels/_rust/table.py). Plain data, no imports."""
KERNELS = [
    # 4 blocks an SM: ptxas keeps it within 64 registers a thread
    {"name": "layernorm", "call": "layernorm",
     "params": ["x: *const f32", "gamma: *const f32", "beta: *const f32", "y: *mut f32", "R: u32", "C: u32",
                "eps: f32"],
     "threads": 256, "blocks_per_sm": 4, "lengths": {"x": "r * c", "gamma": "c", "beta": "c", "y": "r * c"},
     "work": "r * c",
     "require": [["r == 0 || c > 0", "C = 0: a row needs at least one column to normalise over"]],
     "geometry": "launch::layernorm(r)"},
    # the same body on bf16 storage (u16 bits), for the model blocks' bf16 column
    {"name": "layernorm_bf16", "call": "layernorm::<u16>",
     "params": ["x: *const u16", "gamma: *const u16", "beta: *const u16", "y: *mut u16", "R: u32", "C: u32",
                "eps: f32"],
     "threads": 256, "blocks_per_sm": 4, "lengths": {"x": "r * c", "gamma": "c", "beta": "c", "y": "r * c"},
     "work": "r * c",
     "require": [["r == 0 || c > 0", "C = 0: a row needs at least one column to normalise over"]],
     "geometry": "launch::layernorm(r)"},
]
