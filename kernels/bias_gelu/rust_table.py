"""The Rust kernel of bias_gelu: its name, parameters, launch bounds and geometry, written once (fields:
kernels/_rust/table.py). Plain data, no imports."""
KERNELS = [
    # narrow rows get narrower blocks (launch.rs): 256 threads is the most
    {"name": "bias_gelu", "call": "bias_gelu", "params": ["x: *const f32", "b: *const f32", "y: *mut f32", "R: u32",
                                                          "C: u32"],
     "threads": 256, "blocks_per_sm": 1, "lengths": {"x": "r * c", "b": "c", "y": "r * c"}, "work": "r * c",
     "require": [], "geometry": "launch::bias_gelu(r, c)"},
    # the same body on bf16 storage (u16 bits), for the model blocks' bf16 column
    {"name": "bias_gelu_bf16", "call": "bias_gelu::<u16>",
     "params": ["x: *const u16", "b: *const u16", "y: *mut u16", "R: u32", "C: u32"],
     "threads": 256, "blocks_per_sm": 1, "lengths": {"x": "r * c", "b": "c", "y": "r * c"}, "work": "r * c",
     "require": [], "geometry": "launch::bias_gelu(r, c)"},
]
