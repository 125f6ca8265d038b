//! Synthetic histories, one or more for each anomaly, and valid ones.

use super::*;

pub(super) fn append(key: u32, value: i64) -> MicroOp {
    MicroOp::Append { key, value }
}

pub(super) fn read(key: u32, list: &[i64]) -> MicroOp {
    MicroOp::Read {
        key,
        value: Some(list.to_vec()),
    }
}

/// Transaction `i` of `txns` is client `i`'s, and runs from `2i` to `2i + 1`.
fn history(txns: Vec<(Outcome, Vec<MicroOp>)>) -> Vec<Txn> {
    let txn = |(i, (outcome, ops)): (usize, (Outcome, Vec<MicroOp>))| Txn {
        client: i as u32,
        ops,
        outcome,
        invoked: 2 * i as u64,
        completed: 2 * i as u64 + 1,
    };
    txns.into_iter().enumerate().map(txn).collect()
}

/// Committed transactions only.
fn ok(txns: Vec<Vec<MicroOp>>) -> Vec<Txn> {
    history(txns.into_iter().map(|ops| (Outcome::Ok, ops)).collect())
}

fn names(r: &Report) -> Vec<&'static str> {
    r.counts().into_keys().collect()
}

/// The one cycle of class `name`; asserts it is a closed chain of edges and returns
/// its transactions and dependencies.
fn cycle(r: &Report, name: &str) -> (Vec<usize>, Vec<Dep>) {
    let found: Vec<&Anomaly> = r.named(name).collect();
    assert_eq!(found.len(), 1, "{name} in {r}");
    let Anomaly::Cycle { steps, .. } = found[0] else {
        panic!("{name} is not a cycle: {r}")
    };
    for (i, s) in steps.iter().enumerate() {
        assert_eq!(s.to, steps[(i + 1) % steps.len()].from, "not closed: {r}");
    }
    let txns = steps.iter().map(|s| s.from).collect();
    (txns, steps.iter().map(|s| s.dep).collect())
}

#[test]
fn a_serial_history_is_valid_and_clean() {
    let r = check(&ok(vec![
        vec![read(1, &[]), append(1, 1), append(2, 1)],
        vec![read(1, &[1]), append(1, 2), read(1, &[1, 2]), read(2, &[1])],
        vec![read(1, &[1, 2]), read(2, &[1]), append(2, 2)],
        vec![read(1, &[1, 2]), read(2, &[1, 2])],
    ]));
    assert!(r.anomalies.is_empty(), "{r}");
    assert!(r.valid_under_si && r.ok());
    assert_eq!((r.txns, r.committed, r.failed, r.unknown), (4, 4, 0, 0));
    assert!(check(&[]).ok());
}

#[test]
fn write_skew_is_g2_item_and_allowed_under_si() {
    let r = check(&ok(vec![
        vec![read(1, &[]), read(2, &[]), append(1, 1)],
        vec![read(1, &[]), read(2, &[]), append(2, 1)],
        vec![read(1, &[1]), read(2, &[1])],
    ]));
    assert_eq!(names(&r), ["G2-item"], "{r}");
    assert_eq!(cycle(&r, "G2-item").1, [Dep::Rw, Dep::Rw]);
    assert!(r.valid_under_si, "{r}");
    assert!(r
        .to_string()
        .contains("allowed under snapshot isolation:\n  G2-item"));
}

#[test]
fn rw_edges_that_meet_round_the_cycle_are_allowed() {
    // T0 -rw-> T1 -wr-> T2 -rw-> T0: the two rw edges meet at T0 (Fekete's read-only
    // anomaly), which snapshot isolation allows.
    let r = check(&ok(vec![
        vec![read(1, &[]), append(3, 1)],
        vec![append(1, 1), append(2, 1)],
        vec![read(2, &[1]), read(3, &[])],
        vec![read(1, &[1]), read(3, &[1])],
    ]));
    assert_eq!(names(&r), ["G2-item"], "{r}");
    let deps = vec![Dep::Rw, Dep::Rw, Dep::Wr];
    assert_eq!(cycle(&r, "G2-item"), (vec![2, 0, 1], deps));
    assert!(r.valid_under_si, "{r}");
}

#[test]
fn g0_write_cycle() {
    let r = check(&ok(vec![
        vec![append(1, 1), append(2, 2)],
        vec![append(1, 2), append(2, 1)],
        vec![read(1, &[1, 2]), read(2, &[1, 2])],
    ]));
    assert_eq!(names(&r), ["G0"], "{r}");
    assert_eq!(cycle(&r, "G0"), (vec![1, 0], vec![Dep::Ww, Dep::Ww]));
    assert!(!r.valid_under_si);
}

#[test]
fn g1a_aborted_read() {
    let r = check(&history(vec![
        (Outcome::Fail, vec![append(1, 1)]),
        (Outcome::Ok, vec![read(1, &[1])]),
    ]));
    let g1a = Anomaly::G1a {
        reader: 1,
        writer: 0,
        key: 1,
        value: 1,
    };
    assert_eq!(r.anomalies, [g1a], "{r}");
    assert!(!r.valid_under_si);
}

#[test]
fn g1b_intermediate_read() {
    let r = check(&ok(vec![
        vec![append(1, 1), append(1, 2)],
        vec![read(1, &[1])],
        vec![read(1, &[1, 2])],
    ]));
    let g1b = Anomaly::G1b {
        reader: 1,
        writer: 0,
        key: 1,
        value: 1,
        last: 2,
    };
    assert_eq!(r.named("G1b").collect::<Vec<_>>(), [&g1b], "{r}");
    // Reading half of T0 also puts T1 both after it (wr) and before it (rw).
    assert_eq!(cycle(&r, "G-single").1, [Dep::Rw, Dep::Wr]);
    assert!(!r.valid_under_si);
}

/// Each reads what the other appended.
fn circular_flow() -> Vec<Txn> {
    ok(vec![
        vec![append(1, 1), read(2, &[1])],
        vec![append(2, 1), read(1, &[1])],
    ])
}

/// T1 reads key 2 after T0 and key 1 before it.
fn read_skew() -> Vec<Txn> {
    ok(vec![
        vec![append(1, 1), append(2, 1)],
        vec![read(1, &[]), read(2, &[1])],
        vec![read(1, &[1]), read(2, &[1])],
    ])
}

#[test]
fn g1c_circular_information_flow() {
    let r = check(&circular_flow());
    assert_eq!(names(&r), ["G1c"], "{r}");
    assert_eq!(cycle(&r, "G1c").1, [Dep::Wr, Dep::Wr]);
    assert!(!r.valid_under_si);
}

#[test]
fn g_single_read_skew() {
    let r = check(&read_skew());
    assert_eq!(names(&r), ["G-single"], "{r}");
    assert_eq!(cycle(&r, "G-single"), (vec![1, 0], vec![Dep::Rw, Dep::Wr]));
    assert!(!r.valid_under_si);
    let text = r.to_string();
    assert!(
        text.contains("NOT valid under snapshot isolation"),
        "{text}"
    );
    assert!(text.contains("G-single: T1 -> T0 -> T1"), "{text}");
    assert!(text.contains("T1 -rw-> T0: key 1: T1 read it empty, T0 appended the next element, 1"));
    assert!(
        text.contains("T0 -wr-> T1: key 2: T1 read it up to T0's 1"),
        "{text}"
    );
}

#[test]
fn g_nonadjacent_rw_edges_are_a_violation() {
    // T0 -rw-> T1 -wr-> T2 -rw-> T3 -wr-> T0: two rw edges, never adjacent.
    let r = check(&ok(vec![
        vec![read(1, &[]), read(4, &[1])],
        vec![append(1, 1), append(2, 1)],
        vec![read(2, &[1]), read(3, &[])],
        vec![append(3, 1), append(4, 1)],
        vec![read(1, &[1]), read(3, &[1])],
    ]));
    // G2-item (the same cycle) is not looked for where a violation is found.
    assert_eq!(names(&r), ["G-nonadjacent"], "{r}");
    let deps = [Dep::Rw, Dep::Wr, Dep::Rw, Dep::Wr];
    assert_eq!(
        cycle(&r, "G-nonadjacent"),
        (vec![0, 1, 2, 3], deps.to_vec())
    );
    assert!(!r.valid_under_si);
}

#[test]
fn lost_update() {
    let r = check(&ok(vec![
        vec![append(1, 1)],
        vec![read(1, &[1]), append(1, 2)],
        vec![read(1, &[1]), append(1, 3)],
        vec![read(1, &[1, 2, 3])],
    ]));
    let lost = Anomaly::LostUpdate {
        key: 1,
        read: vec![1],
        txns: vec![1, 2],
    };
    assert_eq!(r.named("lost-update").collect::<Vec<_>>(), [&lost], "{r}");
    assert!(!r.valid_under_si);
}

#[test]
fn internal_inconsistency() {
    let r = check(&ok(vec![
        vec![append(1, 1), read(1, &[])],
        vec![read(2, &[]), append(2, 5), read(2, &[9, 5])],
        vec![append(2, 9)],
    ]));
    let unknown_prefix = Anomaly::Internal {
        txn: 0,
        key: 1,
        read: vec![],
        expected: vec![1],
        prefix_unknown: true,
    };
    let exact = Anomaly::Internal {
        txn: 1,
        key: 2,
        read: vec![9, 5],
        expected: vec![5],
        prefix_unknown: false,
    };
    assert_eq!(
        r.named("internal").collect::<Vec<_>>(),
        [&unknown_prefix, &exact]
    );
    assert!(
        r.to_string()
            .contains("T0 read key 1 as [], expected [..., 1]"),
        "{r}"
    );
    assert!(!r.valid_under_si);
}

#[test]
fn future_read() {
    let r = check(&ok(vec![vec![read(1, &[1]), append(1, 1)]]));
    let future = Anomaly::FutureRead {
        txn: 0,
        key: 1,
        value: 1,
    };
    assert_eq!(r.anomalies, [future], "{r}");
}

#[test]
fn duplicate_elements_garbage_reads_and_incompatible_orders() {
    let r = check(&ok(vec![
        vec![append(1, 1)],
        vec![read(1, &[1, 1])],
        vec![read(2, &[42])],
        vec![append(3, 1)],
        vec![append(3, 2)],
        vec![read(3, &[1, 2])],
        vec![read(3, &[2, 1])],
    ]));
    let expected = [
        Anomaly::DuplicateElements {
            txn: 1,
            key: 1,
            read: vec![1, 1],
        },
        Anomaly::IncompatibleOrder {
            key: 3,
            txns: [6, 5],
            reads: [vec![2, 1], vec![1, 2]],
        },
        Anomaly::GarbageRead {
            txn: 2,
            key: 2,
            value: 42,
        },
    ];
    assert_eq!(r.anomalies, expected, "{r}");
    assert!(!r.valid_under_si);
}

#[test]
fn duplicate_appends() {
    let r = check(&ok(vec![vec![append(1, 7)], vec![append(1, 7)]]));
    let dup = Anomaly::DuplicateAppends {
        key: 1,
        value: 7,
        txns: vec![0, 1],
    };
    assert_eq!(r.anomalies, [dup], "{r}");
}

#[test]
fn unknown_transactions_count_where_read_and_failed_ones_nowhere() {
    let r = check(&history(vec![
        (Outcome::Unknown, vec![append(1, 1), append(2, 1)]),
        (Outcome::Ok, vec![read(1, &[]), read(2, &[1])]),
        (Outcome::Ok, vec![read(1, &[1])]),
        (Outcome::Fail, vec![append(3, 1), read(1, &[5])]),
        (Outcome::Unknown, vec![append(3, 2), read(1, &[6])]),
    ]));
    assert_eq!(names(&r), ["G-single"], "{r}");
    assert_eq!(cycle(&r, "G-single").0, [1, 0]);
    assert_eq!((r.committed, r.failed, r.unknown), (2, 1, 2));
}

#[test]
fn the_shortest_cycle_is_reported() {
    // A wr ring T0 -> T1 -> T2 -> T3 -> T0, and T1 -> T0 across it.
    let r = check(&ok(vec![
        vec![append(0, 1), read(3, &[1]), read(1, &[1])],
        vec![append(1, 1), read(0, &[1])],
        vec![append(2, 1), read(1, &[1])],
        vec![append(3, 1), read(2, &[1])],
    ]));
    assert_eq!(names(&r), ["G1c"], "{r}");
    assert_eq!(cycle(&r, "G1c"), (vec![1, 0], vec![Dep::Wr, Dep::Wr]));
}

#[test]
fn a_search_out_of_budget_is_undecided() {
    let r = check_with_budget(&circular_flow(), 0);
    assert!(r.named("cycle-search-timeout").count() >= 1, "{r}");
    assert!(!r.valid_under_si);
}

#[test]
fn the_report_serializes() {
    let r = check(&read_skew());
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["valid_under_si"], false);
    assert_eq!(json["anomalies"][0]["type"], "cycle");
    assert_eq!(json["anomalies"][0]["class"], "G-single");
    assert_eq!(json["anomalies"][0]["steps"][0]["dep"], "rw");
}
