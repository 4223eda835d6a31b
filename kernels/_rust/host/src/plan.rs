//! The work plan of neighbor_agg: which warp sums which edges. Rows with at most `split` edges
//! are one task each; a longer row (a hub) is cut into chunks of `split` edges (more where that
//! would give over MAX_PARTS chunks) whose partial sums the last chunk adds in order. Hub chunks come first in the plan, so the warps that wait for
//! partials only wait for tasks launched before them.

/// Fields of a plan entry, as the kernel reads them.
pub const FIELDS: usize = 6;
/// The most chunks a hub is cut into: one warp adds the partials at the end (two loads in flight),
/// so a 2^20-edge hub in 128-edge chunks (8192 partials) would leave that warp summing for
/// milliseconds after everything else has finished; 1024 chunks of 1024 edges balance the two.
pub const MAX_PARTS: usize = 1024;

#[derive(Debug, PartialEq, Eq)]
pub struct Plan {
    /// row, first edge, end edge, first partial slot, part, parts; empty when no row is split
    /// (the kernel then takes task t = row t straight from rowptr)
    pub entries: Vec<i32>,
    pub tasks: usize,
    pub parts: usize,
}

pub fn build(rowptr: &[i32], split: usize) -> Result<Plan, String> {
    if rowptr.is_empty() {
        return Err("rowptr must have n + 1 >= 1 entries".into());
    }
    if split == 0 {
        return Err("split must be positive".into());
    }
    let n = rowptr.len() - 1;
    let degree = |r: usize| (rowptr[r + 1] as i64 - rowptr[r] as i64).max(0) as usize;
    let mut hubs: Vec<usize> = (0..n).filter(|&r| degree(r) > split).collect();
    if hubs.is_empty() {
        return Ok(Plan { entries: Vec::new(), tasks: n, parts: 0 });
    }
    hubs.sort_by_key(|&r| (std::cmp::Reverse(degree(r)), r));
    let mut entries = Vec::new();
    let mut slot = 0usize;
    for &r in &hubs {
        let (lo, deg) = (rowptr[r] as usize, degree(r));
        let chunk = split.max(deg.div_ceil(MAX_PARTS));
        let parts = deg.div_ceil(chunk);
        for p in 0..parts {
            let e0 = lo + p * chunk;
            let e1 = (e0 + chunk).min(lo + deg);
            entries.extend([r, e0, e1, slot, p, parts].map(|v| v as i32));
        }
        slot += parts;
    }
    for r in 0..n {
        if degree(r) <= split {
            entries.extend([r, rowptr[r] as usize, rowptr[r + 1] as usize, 0, 0, 1].map(|v| v as i32));
        }
    }
    let tasks = entries.len() / FIELDS;
    Ok(Plan { entries, tasks, parts: slot })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_hub_means_no_plan() {
        let p = build(&[0, 2, 2, 5], 4).unwrap();
        assert_eq!(p, Plan { entries: vec![], tasks: 3, parts: 0 });
    }

    #[test]
    fn hubs_are_cut_and_come_first() {
        // row 1 has 10 edges, split 4: chunks [2,6) [6,10) [10,12), then rows 0 and 2
        let p = build(&[0, 2, 12, 13], 4).unwrap();
        assert_eq!(p.tasks, 5);
        assert_eq!(p.parts, 3);
        let e: Vec<&[i32]> = p.entries.chunks(FIELDS).collect();
        assert_eq!(e[0], &[1, 2, 6, 0, 0, 3]);
        assert_eq!(e[2], &[1, 10, 12, 0, 2, 3]);
        assert_eq!(e[3], &[0, 0, 2, 0, 0, 1]);
        assert_eq!(e[4], &[2, 12, 13, 0, 0, 1]);
    }

    #[test]
    fn every_edge_is_in_exactly_one_task() {
        let rowptr = [0, 100, 101, 101, 350, 351];
        let p = build(&rowptr, 16).unwrap();
        let mut covered = vec![0u8; 351];
        for t in p.entries.chunks(FIELDS) {
            for e in t[1]..t[2] {
                covered[e as usize] += 1;
            }
        }
        assert!(covered.iter().all(|&c| c == 1));
        // the bigger hub (row 3, 249 edges) is first
        assert_eq!(p.entries[0], 3);
    }

    #[test]
    fn a_huge_hub_gets_at_most_max_parts_chunks() {
        let deg = 5000 * MAX_PARTS + 7;
        let p = build(&[0, deg as i32, deg as i32 + 3], 128).unwrap();
        assert_eq!(p.parts, deg.div_ceil(5001)); // chunks of ceil(deg / MAX_PARTS) = 5001 edges
        assert!(p.parts <= MAX_PARTS);
        let last = &p.entries[(p.parts - 1) * FIELDS..p.parts * FIELDS];
        assert_eq!(last[2] as usize, deg); // the chunks end where the hub does
    }

    #[test]
    fn bad_inputs_are_refused() {
        assert!(build(&[], 4).is_err());
        assert!(build(&[0, 1], 0).is_err());
    }
}
