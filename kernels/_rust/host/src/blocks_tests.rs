//! blocks.rs's tests: argument checks, names and precisions, the scratch layout (no GPU).
use super::*;

fn mlp(t: u64, d: u64, h: u64) -> Vec<u64> {
    let s = scratch_floats(0, t, d, h);
    let mut a = vec![0x1000u64; 9];
    a.extend([t, d, h, s, 1e-5f32.to_bits() as u64]);
    a
}

fn mp(n: u64, f: u64, h: u64) -> Vec<u64> {
    let mut a = vec![0x1000u64; 15];
    a[11] = 0; // no plan
    a.extend([n, 3 * n, f, h, n, 0, scratch_floats(1, n, f, h), 1e-5f32.to_bits() as u64]);
    a
}

#[test]
fn good_arguments_pass_and_give_the_sizes() {
    let c = check_args(0, &mlp(5, 37, 19)).unwrap();
    assert_eq!((c.rows, c.width, c.hidden), (5, 37, 19));
    assert!(check_args(1, &mp(40, 3, 5)).is_ok());
    // no rows: nothing to check against the scratch
    let mut a = mlp(0, 8, 12);
    a[12] = 0;
    assert!(check_args(0, &a).is_ok());
}

#[test]
fn errors_name_the_block_and_the_argument() {
    let mut a = mlp(5, 37, 19);
    a[3] = 0;
    assert_eq!(check_args(0, &a).unwrap_err().1, "mlp_block: W1 is a null pointer");
    let mut a = mlp(5, 37, 19);
    a[10] = 0;
    assert!(check_args(0, &a).unwrap_err().1.starts_with("mlp_block: d = 0"));
    let mut a = mlp(5, 37, 19);
    a[9] = (-3i64) as u64;
    assert_eq!(check_args(0, &a).unwrap_err().1, "mlp_block: T = -3 must not be negative");
    let mut a = mlp(5, 37, 19);
    a[12] -= 1;
    assert!(check_args(0, &a).unwrap_err().1.contains("mlp_block: scratch holds"));
    let mut a = mlp(5, 37, 19);
    a[13] = 0;
    assert!(check_args(0, &a).unwrap_err().1.contains("eps = 0"));
    assert!(check_args(0, &mlp(5, 37, 19)[..13]).unwrap_err().1.contains("takes 14 packed arguments"));
    let mut a = mp(40, 3, 5);
    a[1] = 0;
    assert_eq!(check_args(1, &a).unwrap_err().1, "mp_block: col is a null pointer");
    let mut a = mp(40, 3, 5);
    a[19] = 7;
    assert!(check_args(1, &a).unwrap_err().1.contains("mp_block: without a plan"));
    let mut a = mp(40, 3, 5);
    a[18] = 0;
    assert!(check_args(1, &a).unwrap_err().1.starts_with("mp_block: H = 0"));
    assert!(block_index("trimul_block").unwrap_err().1.contains("no block named"));
    // bf16: the same checks, the error naming the block without its precision
    let mut a = mlp(5, 37, 19);
    a[5] = 0;
    assert_eq!(
        check_args(block_index("mlp_block.bf16").unwrap(), &a).unwrap_err().1,
        "mlp_block: W2 is a null pointer"
    );
    let mut a = mp(40, 3, 5);
    a[19] = 7;
    assert!(check_args(block_index("mp_block.bf16").unwrap(), &a).unwrap_err().1.contains("mp_block: without a plan"));
}

#[test]
fn names_precisions_launches_and_output_bytes() {
    let ids: Vec<usize> =
        ["mlp_block", "mp_block", "mlp_block.bf16", "mp_block.bf16"].iter().map(|n| block_index(n).unwrap()).collect();
    assert_eq!(ids, [0, 1, 2, 3]);
    for bad_name in ["mlp_block.fp32", "mlp_block.fp16", "mlp_block.", ".bf16", "mlp_block.bf16.bf16"] {
        assert!(block_index(bad_name).unwrap_err().1.contains("no block named"), "{bad_name}");
    }
    assert_eq!(
        ids.iter().map(|&b| (name(b), is_bf16(b), launches(b))).collect::<Vec<_>>(),
        [("mlp_block", false, 5), ("mp_block", false, 6), ("mlp_block", true, 5), ("mp_block", true, 6)]
    );
    let a = mlp(5, 37, 19);
    assert_eq!(output(0, &a).unwrap().1, 4 * 5 * 37);
    assert_eq!(output(2, &a).unwrap().1, 2 * 5 * 37);
    assert_eq!(scratch_floats(2, 5, 37, 19), scratch_floats(0, 5, 37, 19));
}

#[test]
fn scratch_parts_are_aligned_and_disjoint() {
    let (offs, total) = layout(&parts(1, 37, 33, 17));
    assert_eq!(offs.len(), 5);
    for (i, o) in offs.iter().enumerate() {
        assert_eq!(o % ALIGN, 0);
        let len = parts(1, 37, 33, 17)[i].0 * parts(1, 37, 33, 17)[i].1;
        assert!(o + len <= offs.get(i + 1).copied().unwrap_or(total));
    }
    assert_eq!(scratch_floats(0, 1, 1, 1), 4 * ALIGN);
}
