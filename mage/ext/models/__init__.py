"""Models as their users run them, with this project's kernels swapped in: the module surgery
(``swap``) and the models the note names (``vjepa2``). Forward passes only."""
