"""Speed targets that several operations share, written once (each spec lists its own targets; the
row-wise, memory-bound operations hold the same ones)."""
from mage.book.target import Target

# At the copy limit at the large shape (Triton 0.97 of the measured copy bandwidth and at least as fast
# as torch.compile's kernel; Rust 0.95); at the field shape, ahead of eager PyTorch and within 10% of
# torch.compile's kernel (Triton), and a shorter span than eager PyTorch's (Rust's lean launch path).
MEMORY_BOUND = (Target("triton", "share_of_copy", 0.97),
                Target("triton", "speedup", 1.0, baseline="torch_compile"),
                Target("triton", "speedup", 1.0, baseline="pytorch", shape_set="field"),
                Target("triton", "speedup", 1 / 1.1, baseline="torch_compile", shape_set="field"),
                Target("rust", "share_of_copy", 0.95),
                Target("rust", "speedup", 1.0, baseline="pytorch", shape_set="field", view="event_span"))
