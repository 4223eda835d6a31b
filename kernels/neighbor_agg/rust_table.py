"""The Rust kernel of neighbor_agg: its name, parameters, launch bounds and geometry, written once
(fields: kernels/_rust/table.py). Plain data, no imports."""
KERNELS = [
    # one warp per task (a row, or a chunk of a hub's edges from the plan); plan 0: task t is row t
    {"name": "neighbor_agg", "call": "neighbor_agg",
     "params": ["rowptr: *const i32", "col: *const i32", "w: *const f32", "x: *const f32", "y: *mut f32",
                "plan: *const i32", "ws: *mut f32", "flags: *mut u32", "n: u32", "n_src: u32", "E: u32", "F: u32",
                "tasks: u32", "parts: u32"],
     "threads": 256, "blocks_per_sm": 4,
     "lengths": {"rowptr": "n + 1", "col": "e", "w": "e", "x": "if e > 0 { n_src * f } else { 0 }", "y": "n * f",
                 "ws": "parts * f", "flags": "parts"},
     "work": "n * f",
     "require": [["plan != 0 || tasks == n", "without a plan there is one task per row: tasks = {tasks}, n = {n}"]],
     "geometry": "launch::neighbor_agg(tasks as u64)"},
    # the same body with bf16 features (u16 bits): weights and partial sums stay f32
    {"name": "neighbor_agg_bf16", "call": "neighbor_agg::<u16>",
     "params": ["rowptr: *const i32", "col: *const i32", "w: *const f32", "x: *const u16", "y: *mut u16",
                "plan: *const i32", "ws: *mut f32", "flags: *mut u32", "n: u32", "n_src: u32", "E: u32", "F: u32",
                "tasks: u32", "parts: u32"],
     "threads": 256, "blocks_per_sm": 4,
     "lengths": {"rowptr": "n + 1", "col": "e", "w": "e", "x": "if e > 0 { n_src * f } else { 0 }", "y": "n * f",
                 "ws": "parts * f", "flags": "parts"},
     "work": "n * f",
     "require": [["plan != 0 || tasks == n", "without a plan there is one task per row: tasks = {tasks}, n = {n}"]],
     "geometry": "launch::neighbor_agg(tasks as u64)"},
]
