"""The fused road's config keys (``_fused``): their defaults, the refusals of values the kernels cannot
take, and the launches a call makes."""
from __future__ import annotations

from mage.errors import MageInputError

from .spec import NAME

MAX_WIDTH = 256  # channels a program holds whole (a [64, 256] FP32 tile is 256 registers a thread at 4 warps)
BMMS = ("triton", "cublas")
SIGMOIDS = ("exact", "fast", "tanh")
# The chunk loops are short (C / chunk steps) and read their weights from L2: one stage. More stages
# only multiply the shared memory (at FP32 2-3x, past the 227 KB a block may have, compiled for sm_90a).
STAGES = 1
FOLD_BYTES = 192 * 1024  # IN_FOLD's z and w' tiles: a block has 227 KB, its stores and layout changes need the rest
CM_BYTES = 200 * 1024  # IN_CM's tiles: a block has 227 KB, its stores' staging needs the rest
PIPE_BYTES = 224 * 1024  # IN_PIPE's w_in and z's stages (FIN_PIPE's w_out, o's and g's); compiled for sm_90a at
# C = H = 128 the listed IN_PIPE configs take
# 1-23 KB more (197-226 KB for 192-224 here), under a block's 227
RESIDENT_BYTES = 176 * 1024  # IN_RESIDENT's budget for w_in: a block has 227 KB, z's tiles need the rest


def padded(n: int) -> int:
    """A tile's width for n channels: a power of two from 16."""
    return max(16, 1 << max(n - 1, 0).bit_length())


def resident_bytes(C: int, H: int, itemsize: int = 2) -> int:
    """Bytes of shared memory IN_RESIDENT's w_in takes at padded widths (tiles are powers of two from 16)."""
    cw, hw = padded(C), padded(H)
    return itemsize * cw * (4 * hw + cw)


def keys(bmm="cublas", in_r=64, in_h=64, in_warps=4, fin_r=64, fin_c=64, fin_warps=4, road_name="fused",
         join=False, stages=STAGES, tma=False, fin_tma=False, tstore=False, resident=False, fin_t=False,
         in_maxnreg=0, sig="exact", fin_gtma=False, fin_zgate=False, ab=False, gc=0, fold=0, fold_loop=0, cm=0,
         lnfast=False, pipe=0, fin_pipe=0) -> dict:
    """A config's keys for this road (the steps road's configs carry them, unread, with ROAD='steps').
    ``join``: the first kernel's gate and value columns interleaved, one dot for both; ``tma``: and its
    weights loaded through tensor descriptors; ``fin_tma``: the last kernel's too; ``tstore``: the first
    kernel's a, b and g stored through descriptors (where their rows are 16-byte multiples); ``resident``: the
    first kernel persistent, w_in loaded once a program and kept in shared memory (``_fused_resident``);
    ``fin_t``: the last kernel reads o's tile in its own order, [channels, pairs], and transposes it for the dot;
    ``in_maxnreg``: a ceiling on the first kernel's registers a thread (0: the compiler's choice), where a few
    fewer let one more block onto an SM (registers and shared memory cap it at 4 of 4 warps each); ``sig``: the
    first kernel's sigmoid, one of ``SIGMOIDS`` (``_fused_rows._sigmoid`` says what each costs and loses);
    ``fin_gtma``: the last kernel reads g and writes y through tensor descriptors (where their rows allow);
    ``fin_zgate``: the output gate computed by the last kernel from z (LayerNorm again, its own projection), so
    g never crosses memory (cuEquivariance's finishing kernel reads z, by the bytes a profile counted); ``ab``:
    with ``tma``, a chunk's columns of a and of b side by side in one weight tile, one load and one dot where
    there were two; ``gc``: the output gate's chunk of columns (0: ``in_h``'s); ``fold``: the first kernel as a
    GEMM on z as it lies, the LayerNorm folded into its epilogue (``_fused_fold``), tiles of ``in_r`` pairs and
    this many columns (0: the grid kernel; bf16 only), one column tile a program or, with ``fold_loop`` (its
    pipeline's stages), all of them in turn; ``cm``: the first kernel's products formed [channels, pairs], the
    order a and b lie in (``_fused_cm``), where the grid kernel transposes its [pairs, channels] tiles: 1, four
    products a chunk (a's gates, values, b's, b's); 2, two, gates and values in alternate blocks of 8 rows;
    ``lnfast``: the grid first kernel's LayerNorm skips the overflow guard's scaling where no row of a tile needs it
    (``_fused_rows._layernorm_rows``; in the last kernel, compiled for sm_90a, it took 168 registers against 122);
    ``pipe``: the first kernel persistent, one program an SM, w_in held in shared memory and z's tiles in a pipeline
    of this many stages (``_fused_pipe``; 0: the grid kernel; with ``ab``, whose four tiles of ``in_h`` channels hold
    a's and b's weights: H at most 4 ``in_h``); ``fin_pipe``: the last kernel in the same shape, w_out held and o's and
    g's tiles in a pipeline of this many stages (0: the grid kernel; with ``fin_tma``, whose descriptor it reads)."""
    return dict(ROAD=road_name, BMM=bmm, IN_R=in_r, IN_H=in_h, IN_WARPS=in_warps, FIN_R=fin_r, FIN_C=fin_c,
                FIN_WARPS=fin_warps, IN_JOIN=join, F_STAGES=stages, IN_TMA=tma,
                FIN_TMA=fin_tma, IN_TSTORE=tstore, IN_RESIDENT=resident, FIN_T=fin_t,
                IN_MAXNREG=in_maxnreg, IN_SIG=sig, FIN_GTMA=fin_gtma, FIN_ZGATE=fin_zgate, IN_AB=ab, IN_GC=gc,
                IN_FOLD=fold, IN_FOLD_LOOP=fold_loop, IN_CM=cm, IN_LNFAST=lnfast,
                IN_PIPE=pipe, FIN_PIPE=fin_pipe)


def refuse_bad_config(c: dict, C: int, H: int, itemsize: int = 4, op: str = NAME) -> None:
    """A config the fused road cannot run at these widths refused, naming ``op`` (the form that called)."""
    def no(why):
        raise MageInputError(op, "config", why)
    if c["ROAD"] not in ("steps", "fused"):
        no(f"ROAD must be 'steps' or 'fused', got {c['ROAD']!r}")
    if c["BMM"] not in BMMS:
        no(f"BMM must be one of {BMMS}, got {c['BMM']!r}")
    if c["ROAD"] == "fused" and c["BMM"] == "cublas" and c["CONTRACT"] != "ieee":
        no(f"BMM='cublas' contracts in IEEE FP32 (or bf16 products); CONTRACT={c['CONTRACT']!r} needs BMM='triton'")
    if c["IN_TMA"] and not c["IN_JOIN"]:
        no("IN_TMA loads the weights in IN_JOIN's order: it needs IN_JOIN=True")
    if c["IN_RESIDENT"] and (not c["IN_JOIN"] or c["IN_TMA"] or c["IN_TSTORE"]):
        no("IN_RESIDENT loads w_in whole in IN_JOIN's order and stores by pointer: it needs IN_JOIN=True, "
           "IN_TMA=False and IN_TSTORE=False")
    if c["IN_RESIDENT"] and config_limits(c, dict(C=C, H=H), itemsize):
        no(f"IN_RESIDENT keeps w_in in shared memory and C, H at most 128: {resident_bytes(C, H, itemsize) // 1024} "
           f"KB at C = {C}, H = {H} and {itemsize}-byte values, against its {RESIDENT_BYTES // 1024} KB (bf16 at "
           f"128 channels fits)")
    if c["IN_MAXNREG"] and not 24 <= c["IN_MAXNREG"] <= 255:  # the hardware's range a thread
        no(f"IN_MAXNREG must be 0 (the compiler's choice) or 24 to 255 registers, got {c['IN_MAXNREG']!r}")
    if c["IN_MAXNREG"] and c["IN_RESIDENT"]:
        no("IN_MAXNREG holds the grid's first kernel; IN_RESIDENT's persistent kernel would ignore it")
    if c["IN_SIG"] not in SIGMOIDS:
        no(f"IN_SIG must be one of {SIGMOIDS}, got {c['IN_SIG']!r}")
    if c["IN_SIG"] == "tanh" and itemsize == 4:  # its 2^-11 would be the FP32 block's largest error
        no("IN_SIG='tanh' is accurate to bf16's rounding, not FP32's: at FP32 use 'exact' or 'fast'")
    if c["IN_SIG"] != "exact" and c["IN_RESIDENT"]:
        no("IN_SIG chooses the grid's first kernel's sigmoid; IN_RESIDENT's persistent kernel keeps the exact one")
    if c["FIN_ZGATE"] and (c["IN_RESIDENT"] or c["FIN_GTMA"]):
        no("FIN_ZGATE computes the gate in the last kernel: IN_RESIDENT's kernel stores one, and FIN_GTMA reads one")
    if c["IN_AB"] and (not c["IN_TMA"] or (c["FIN_ZGATE"] and not c["FIN_PIPE"])):
        no("IN_AB lays a's and b's columns out for IN_TMA's descriptors, and the bias with them, which the grid last "
           "kernel's FIN_ZGATE does not read: it needs IN_TMA=True, and FIN_ZGATE=False unless FIN_PIPE")
    if c["IN_GC"] and (c["IN_GC"] < 16 or c["IN_GC"] & (c["IN_GC"] - 1) or c["IN_GC"] > 128):
        no(f"IN_GC must be 0 (IN_H's chunk) or a power of two from 16 to 128, got {c['IN_GC']!r}")
    if c["IN_FOLD_LOOP"] and (not c["IN_FOLD"] or c["IN_FOLD_LOOP"] not in (1, 2, 3)):
        no(f"IN_FOLD_LOOP walks IN_FOLD's column tiles in 1 to 3 stages (0: a program a tile): it needs IN_FOLD, "
           f"got IN_FOLD_LOOP={c['IN_FOLD_LOOP']!r}")
    if c["IN_FOLD"]:
        if c["IN_FOLD"] != 128:  # the loop form at 64 columns failed on an H100 (kernels/NOTES.md), cause not found
            no(f"IN_FOLD must be 0 (the grid kernel) or 128 columns, the width a GPU run has checked; got "
               f"{c['IN_FOLD']!r}")
        if itemsize == 4:
            no("IN_FOLD rounds gamma w_in to bf16 (bf16 only): at FP32 the projections are tf32x3, whose accuracy "
               "that rounding would cost")
        if (c["IN_RESIDENT"] or c["IN_JOIN"] or c["IN_TMA"] or c["IN_AB"] or c["IN_GC"] or c["IN_MAXNREG"]
                or c["FIN_ZGATE"]):
            no("IN_FOLD replaces the grid kernel and stores the gate: IN_RESIDENT, IN_JOIN, IN_TMA, IN_AB, IN_GC, "
               "IN_MAXNREG and FIN_ZGATE must be off")
        if c["IN_R"] > 256:
            no(f"IN_FOLD loads z's tile by TMA, at most 256 rows: IN_R must be at most 256, got {c['IN_R']}")
        need = 2 * padded(C) * (c["IN_R"] + max(c["IN_FOLD_LOOP"], 1) * c["IN_FOLD"])  # z's tile, w''s stages: bf16
        if need > FOLD_BYTES:
            no(f"IN_FOLD's tiles of z and w' take {need // 1024} KB of shared memory at C = {C} (IN_R, IN_FOLD and "
               f"IN_FOLD_LOOP's stages), past its {FOLD_BYTES // 1024} KB")
    if c["IN_CM"] and (c["IN_RESIDENT"] or c["IN_FOLD"] or c["IN_JOIN"] or c["IN_TMA"] or c["IN_AB"] or c["IN_MAXNREG"]
                       or c["FIN_ZGATE"]):
        no("IN_CM replaces the grid kernel, its weights through its own descriptors, and stores the gate: IN_RESIDENT, "
           "IN_FOLD, IN_JOIN, IN_TMA, IN_AB, IN_MAXNREG and FIN_ZGATE must be off")
    if c["IN_LNFAST"] and (c["IN_RESIDENT"] or c["IN_FOLD"] or c["IN_CM"]):
        no("IN_LNFAST is the grid first kernel's LayerNorm: IN_RESIDENT, IN_FOLD and IN_CM's first kernels keep theirs")
    if c["IN_CM"] not in (0, 1, 2):
        no(f"IN_CM must be 0 (the grid kernel), 1 (four products a chunk) or 2 (two, rows in blocks of 8), got "
           f"{c['IN_CM']!r}")
    if c["IN_CM"] == 2 and c["IN_H"] > 128:
        no(f"IN_CM=2 loads 2 IN_H rows of w^T a tile by TMA, at most 256: IN_H must be at most 128, got {c['IN_H']}")
    if c["IN_CM"] and itemsize == 4:  # compiled for sm_90a, tf32x3's operand splits spill (255 registers, 192 bytes)
        no("IN_CM is for bf16: at FP32 its tf32x3 products spill to local memory")
    if c["IN_CM"] and c["IN_H"] > 256:
        no(f"IN_CM loads w^T's rows by TMA, at most 256 a tile: IN_H must be at most 256, got {c['IN_H']}")
    if c["IN_PIPE"] and (not c["IN_AB"] or c["IN_TSTORE"] or c["IN_GC"] or c["IN_LNFAST"] or c["IN_MAXNREG"]
                         or c["IN_RESIDENT"] or c["IN_FOLD"] or c["IN_CM"]):
        no("IN_PIPE holds IN_AB's weight tiles and the gate's as one, and stores by pointer: it needs IN_AB=True, and "
           "IN_TSTORE, IN_GC, IN_LNFAST, IN_MAXNREG, IN_RESIDENT, IN_FOLD and IN_CM off")
    if c["IN_PIPE"] not in (0, 1, 2, 3):
        no(f"IN_PIPE must be 0 (the grid kernel) or 1 to 3 stages, got {c['IN_PIPE']!r}")
    if c["IN_PIPE"] and itemsize == 4:  # tf32x3 at FP32: w_in alone would take 320 KB
        no("IN_PIPE is for bf16: at FP32 w_in would not fit a block's shared memory")
    if c["FIN_PIPE"] and (not c["FIN_TMA"] or c["FIN_T"] or c["FIN_GTMA"]):
        no("FIN_PIPE holds w_out through FIN_TMA's descriptor and reads g by pointer: it needs FIN_TMA=True, and FIN_T "
           "and FIN_GTMA off")
    if c["FIN_PIPE"] and c["FIN_ZGATE"] and not c["IN_AB"]:
        no("FIN_PIPE's FIN_ZGATE reads the gate's weights and bias as IN_AB lays them out: it needs IN_AB=True")
    if c["FIN_PIPE"] not in (0, 1, 2, 3):
        no(f"FIN_PIPE must be 0 (the grid kernel) or 1 to 3 stages, got {c['FIN_PIPE']!r}")
    if c["FIN_PIPE"] and itemsize == 4:  # tf32x3's operand splits of a whole [64, 128] tile, as IN_PIPE's
        no("FIN_PIPE is for bf16, as IN_PIPE")
    why = (config_limits(c, dict(C=C, H=H), itemsize) if c["IN_CM"] or c["IN_PIPE"] or c["FIN_PIPE"] else None)
    if why:
        no(why)
    if c["F_STAGES"] not in (1, 2, 3, 4):
        no(f"F_STAGES must be 1 to 4, got {c['F_STAGES']!r}")
    for key in ("IN_R", "IN_H", "FIN_R", "FIN_C"):
        if c[key] < 16 or c[key] & (c[key] - 1):  # tl.dot's tiles: powers of two from 16
            no(f"{key} must be a power of two of at least 16, got {c[key]}")
    # a TMA tile is at most 256 elements along each dimension
    for on, key, most in (("IN_TMA", "IN_H", 128), ("IN_AB", "IN_H", 64), ("FIN_TMA", "FIN_C", 256), ("IN_TSTORE", "IN_H", 256),
                          ("IN_TSTORE", "IN_R", 256), ("FIN_GTMA", "FIN_R", 256),
                          ("FIN_GTMA", "FIN_C", 256)):
        if c[on] and c[key] > most:
            no(f"{on} moves tiles of at most 256 elements a side: {key} must be at most {most}, got {c[key]}")
    if c["ROAD"] == "fused" and max(C, H) > MAX_WIDTH:
        no(f"ROAD='fused' holds a pair's channels whole, at most {MAX_WIDTH}; got C = {C}, H = {H} "
           f"(ROAD='steps' takes any width)")


def config_limits(c: dict, shape: dict, itemsize: int = 4):
    """Why a variant pinned to ``c`` does not take ``shape``: a resident first kernel whose w_in would not
    fit its shared-memory budget, or an IN_CM first kernel whose tiles would not (the launcher refuses it
    there); else None."""
    if c.get("ROAD") == "fused" and c.get("IN_CM"):  # its bf16 tiles: w^T's for a and b, the gate's, and the
        # normalised z twice (each product's order); an upper bound (compiled at C = 128, 98 KB against 115 here)
        box = c["IN_H"] * (2 if c["IN_CM"] == 2 else 1)
        need = 2 * padded(shape["C"]) * (box + (c["IN_GC"] or c["IN_H"]) + 2 * c["IN_R"])
        if need > CM_BYTES:
            return (f"IN_CM's tiles take up to {need // 1024} KB of shared memory at C = {shape['C']} (IN_H, IN_GC, "
                    f"IN_R), past its {CM_BYTES // 1024} KB")
    if c.get("ROAD") == "fused" and c.get("IN_PIPE"):
        cw = padded(shape["C"])
        need = 2 * cw * (16 * c["IN_H"] + cw + c["IN_PIPE"] * c["IN_R"])  # w_in's five tiles, z's stages: bf16
        if shape["H"] > 4 * c["IN_H"]:
            return (f"IN_PIPE holds a's and b's weights as four tiles of IN_H channels: H = {shape['H']} is past them "
                    f"at IN_H = {c['IN_H']}")
        if need > PIPE_BYTES:
            return (f"IN_PIPE keeps w_in and {c['IN_PIPE']} tiles of z in shared memory: {need // 1024} KB at C = "
                    f"{shape['C']}, past its {PIPE_BYTES // 1024} KB")
    if c.get("ROAD") == "fused" and c.get("FIN_PIPE"):
        cw, hw = padded(shape["C"]), padded(shape["H"])
        zg = bool(c.get("FIN_ZGATE"))  # and the gate's weights (z's tiles in place of g's)
        need = 2 * ((hw + zg * cw) * cw + c["FIN_PIPE"] * c["FIN_R"] * (hw + cw))  # w_out, o's and g's stages: bf16
        if max(cw, hw) > 256:  # w_out is one TMA tile, at most 256 a side
            return (f"FIN_PIPE holds w_out as one tile, at most 256 channels a side: not C = {shape['C']}, "
                    f"H = {shape['H']}")
        if need > PIPE_BYTES:
            return (f"FIN_PIPE keeps w_out and {c['FIN_PIPE']} tiles of o and g in shared memory: {need // 1024} KB at "
                    f"C = {shape['C']}, H = {shape['H']}, past its {PIPE_BYTES // 1024} KB")
    if c.get("ROAD") == "fused" and c.get("IN_RESIDENT"):
        if max(shape["C"], shape["H"]) > 128:  # compiled for sm_90a, wider hidden tiles spill (H = 150: 216-280 B)
            return f"IN_RESIDENT holds pairs' channels up to 128, not C = {shape['C']}, H = {shape['H']}"
        if resident_bytes(shape["C"], shape["H"], itemsize) > RESIDENT_BYTES:
            return f"IN_RESIDENT keeps w_in in shared memory, past its budget at C = {shape['C']}, H = {shape['H']}"
    return None


def launches(c: dict) -> int:
    """Launches per call of one complex: the two fused kernels and the contraction."""
    return 3
