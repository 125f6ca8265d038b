//! Random serial histories check clean; the same with one anomaly injected do not.

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use super::tests::{append, read};
use super::*;

const KEYS: u32 = 6;

/// Each anomaly the injection can make, by name. All but G2-item violate snapshot
/// isolation.
const INJECTED: [&str; 12] = [
    "G0",
    "G1a",
    "G1b",
    "G1c",
    "G-single",
    "G-nonadjacent",
    "G2-item",
    "lost-update",
    "internal",
    "garbage-read",
    "duplicate-elements",
    "incompatible-order",
];

/// A serial execution: every transaction runs alone against `lists`, so every read
/// shows every committed append before it.
struct Sim {
    rng: StdRng,
    lists: Vec<Vec<i64>>,
    next: i64,
    history: Vec<Txn>,
}

impl Sim {
    fn new(seed: u64) -> Self {
        Sim {
            rng: StdRng::seed_from_u64(seed),
            lists: vec![Vec::new(); KEYS as usize],
            next: 1,
            history: Vec::new(),
        }
    }

    fn push(&mut self, outcome: Outcome, ops: Vec<MicroOp>) {
        let t = self.history.len() as u64;
        self.history.push(Txn {
            client: self.rng.gen_range(0..9),
            ops,
            outcome,
            invoked: 2 * t,
            completed: 2 * t + 1,
        });
    }

    /// `n` random transactions of one to four reads and appends: most commit, some fail
    /// (no effect) and some end unknown (an effect or none); only committed reads are
    /// recorded.
    fn random(&mut self, n: usize) {
        for _ in 0..n {
            let (outcome, applies) = match self.rng.gen_range(0..10) {
                0 => (Outcome::Fail, false),
                1 => (Outcome::Unknown, self.rng.gen_bool(0.5)),
                _ => (Outcome::Ok, true),
            };
            let before = self.lists.clone();
            let mut ops = Vec::new();
            for _ in 0..self.rng.gen_range(1..=4) {
                let key = self.rng.gen_range(0..KEYS);
                ops.push(match self.rng.gen_bool(0.5) {
                    true => self.append(key),
                    false => self.read(key),
                });
            }
            if !applies {
                self.lists = before;
            }
            if outcome != Outcome::Ok {
                ops.iter_mut().for_each(forget_read);
            }
            self.push(outcome, ops);
        }
    }

    fn append(&mut self, key: u32) -> MicroOp {
        let value = self.fresh();
        self.lists[key as usize].push(value);
        append(key, value)
    }

    fn read(&self, key: u32) -> MicroOp {
        read(key, &self.lists[key as usize])
    }

    fn fresh(&mut self) -> i64 {
        self.next += 1;
        self.next - 1
    }

    /// `N` distinct keys.
    fn keys<const N: usize>(&mut self) -> [u32; N] {
        let mut keys: Vec<u32> = (0..KEYS).collect();
        keys.shuffle(&mut self.rng);
        std::array::from_fn(|i| keys[i])
    }

    /// A committed transaction reading every key, so the version orders are known.
    fn read_all(&mut self) {
        let ops = (0..KEYS).map(|k| self.read(k)).collect();
        self.push(Outcome::Ok, ops);
    }
}

fn forget_read(op: &mut MicroOp) {
    if let MicroOp::Read { value, .. } = op {
        *value = None;
    }
}

/// The transactions that make anomaly `name` among the serial ones.
fn inject(sim: &mut Sim, name: &str) {
    match name {
        "G0" | "G1c" | "G-single" | "G2-item" => two_key_gadget(sim, name),
        "G1a" | "G1b" | "lost-update" | "internal" => one_key_gadget(sim, name),
        "G-nonadjacent" => nonadjacent_gadget(sim),
        _ => bad_read_gadget(sim, name),
    }
}

fn two_key_gadget(sim: &mut Sim, name: &str) {
    let [a, b] = sim.keys();
    let (x, y) = (sim.fresh(), sim.fresh());
    let (la, lb) = (sim.lists[a as usize].clone(), sim.lists[b as usize].clone());
    let after = |l: &[i64], v: i64| [l, &[v]].concat();
    let txns = match name {
        // x before y on a, y before x on b: each wrote first on one key.
        "G0" => vec![
            vec![append(a, x), append(b, x)],
            vec![append(a, y), append(b, y)],
        ],
        "G1c" => vec![
            vec![append(a, x), read(b, &after(&lb, y))],
            vec![append(b, y), read(a, &after(&la, x))],
        ],
        // The reader sees b after the writer and a before it.
        "G-single" => vec![
            vec![append(a, x), append(b, y)],
            vec![read(a, &la), read(b, &after(&lb, y))],
        ],
        // Write skew: both read both keys before either appends.
        _ => vec![
            vec![read(a, &la), read(b, &lb), append(a, x)],
            vec![read(a, &la), read(b, &lb), append(b, y)],
        ],
    };
    let (on_a, on_b) = match name {
        "G0" => (vec![x, y], vec![y, x]),
        _ => (vec![x], vec![y]),
    };
    sim.lists[a as usize].extend(on_a);
    sim.lists[b as usize].extend(on_b);
    txns.into_iter().for_each(|ops| sim.push(Outcome::Ok, ops));
}

fn one_key_gadget(sim: &mut Sim, name: &str) {
    let [k] = sim.keys();
    let (x, y) = (sim.fresh(), sim.fresh());
    let before = sim.lists[k as usize].clone();
    let with_x = [before.as_slice(), &[x]].concat();
    let (outcome, txns, applied) = match name {
        // A failed append that takes effect anyway.
        "G1a" => (Outcome::Fail, vec![vec![append(k, x)]], vec![x]),
        "G1b" => (
            Outcome::Ok,
            vec![vec![append(k, x), append(k, y)], vec![read(k, &with_x)]],
            vec![x, y],
        ),
        "lost-update" => (
            Outcome::Ok,
            vec![
                vec![read(k, &before), append(k, x)],
                vec![read(k, &before), append(k, y)],
            ],
            vec![x, y],
        ),
        // The transaction does not see its own append.
        _ => (
            Outcome::Ok,
            vec![vec![append(k, x), read(k, &before)]],
            vec![x],
        ),
    };
    sim.lists[k as usize].extend(applied);
    txns.into_iter().for_each(|ops| sim.push(outcome, ops));
}

/// T0 -rw-> T1 -wr-> T2 -rw-> T3 -wr-> T0.
fn nonadjacent_gadget(sim: &mut Sim) {
    let [k1, k2, k3, k4] = sim.keys();
    let before = |sim: &Sim, k: u32| sim.lists[k as usize].clone();
    let (l1, l3) = (before(sim, k1), before(sim, k3));
    let ops1 = vec![sim.append(k1), sim.append(k2)];
    let ops3 = vec![sim.append(k3), sim.append(k4)];
    let ops0 = vec![read(k1, &l1), sim.read(k4)];
    let ops2 = vec![sim.read(k2), read(k3, &l3)];
    for ops in [ops0, ops1, ops2, ops3] {
        sim.push(Outcome::Ok, ops);
    }
}

/// A committed read of one key that no execution gives: with an element nobody
/// appended, with one twice, or with the last two swapped.
fn bad_read_gadget(sim: &mut Sim, name: &str) {
    let [k] = sim.keys();
    for _ in 0..2 {
        let op = sim.append(k);
        sim.push(Outcome::Ok, vec![op]);
    }
    let mut list = sim.lists[k as usize].clone();
    let n = list.len();
    match name {
        "garbage-read" => list.push(-1),
        "duplicate-elements" => list.push(list[n - 1]),
        _ => list.swap(n - 2, n - 1),
    }
    sim.push(Outcome::Ok, vec![read(k, &list)]);
}

/// `n` random transactions, then a read of every key.
fn serial(seed: u64, n: usize) -> Vec<Txn> {
    let mut sim = Sim::new(seed);
    sim.random(n);
    sim.read_all();
    sim.history
}

/// The same, with anomaly `name` injected half way.
fn serial_with(seed: u64, n: usize, name: &str) -> Vec<Txn> {
    let mut sim = Sim::new(seed);
    sim.random(n / 2);
    inject(&mut sim, name);
    sim.random(n - n / 2);
    sim.read_all();
    sim.history
}

/// How many edges of each dependency the graph of `history` has.
fn edges(history: &[Txn]) -> [usize; 3] {
    let facts = infer::Facts::new(history, &mut Vec::new());
    let graph = graph::Graph::new(history, &facts);
    let mut n = [0; 3];
    for (_, deps) in graph.out.iter().flatten() {
        for (i, dep) in Dep::ALL.into_iter().enumerate() {
            n[i] += usize::from(deps & dep.bit() != 0);
        }
    }
    n
}

#[test]
fn random_serial_histories_check_clean() {
    for seed in 1..=30 {
        let h = serial(seed, 80);
        let r = check(&h);
        let [ww, wr, rw] = edges(&h);
        eprintln!(
            "seed {seed}: {} transactions, ww/wr/rw edges {ww}/{wr}/{rw}",
            h.len()
        );
        assert!(
            ww > 0 && wr > 0 && rw > 0,
            "seed {seed}: too few dependencies to tell"
        );
        assert!(r.anomalies.is_empty(), "seed {seed}: {r}");
    }
}

#[test]
fn each_injected_anomaly_is_found() {
    for name in INJECTED {
        for seed in 1..=10 {
            let r = check(&serial_with(seed, 80, name));
            eprintln!("{name}, seed {seed}: {:?}", r.counts());
            assert!(r.named(name).count() >= 1, "{name}, seed {seed}: {r}");
            assert_eq!(
                r.valid_under_si,
                name == "G2-item",
                "{name}, seed {seed}: {r}"
            );
        }
    }
}

/// A snapshot-isolation store: a transaction reads the lists as committed when it began,
/// plus its own appends, and commits unless a transaction that committed since it began
/// appended to a key it appends to (first committer wins; without it, the store loses
/// updates).
struct SiStore {
    lists: Vec<Vec<i64>>,
    /// The keys each commit appended to, in commit order.
    commits: Vec<Vec<u32>>,
    next: i64,
    first_committer_wins: bool,
}

/// A transaction under way.
struct Open {
    client: u32,
    /// Commits before it began.
    began: usize,
    snapshot: Vec<Vec<i64>>,
    ops: Vec<MicroOp>,
    steps_left: usize,
    invoked: Nanos,
}

impl SiStore {
    fn begin(&self, client: u32, rng: &mut StdRng, now: Nanos) -> Open {
        Open {
            client,
            began: self.commits.len(),
            snapshot: self.lists.clone(),
            ops: Vec::new(),
            steps_left: rng.gen_range(1..=4),
            invoked: now,
        }
    }

    fn step(&mut self, txn: &mut Open, rng: &mut StdRng) {
        let key = rng.gen_range(0..KEYS);
        let list = &mut txn.snapshot[key as usize];
        if rng.gen_bool(0.5) {
            self.next += 1;
            list.push(self.next);
            txn.ops.push(append(key, self.next));
        } else {
            txn.ops.push(read(key, list));
        }
        txn.steps_left -= 1;
    }

    fn commit(&mut self, mut txn: Open, now: Nanos) -> Txn {
        let written: Vec<u32> = txn.ops.iter().filter_map(appended_key).collect();
        let since = &self.commits[txn.began..];
        let conflict = self.first_committer_wins
            && since
                .iter()
                .any(|keys| keys.iter().any(|k| written.contains(k)));
        if conflict {
            txn.ops.iter_mut().for_each(forget_read);
        } else {
            for op in &txn.ops {
                if let MicroOp::Append { key, value } = op {
                    self.lists[*key as usize].push(*value);
                }
            }
            self.commits.push(written);
        }
        let outcome = if conflict { Outcome::Fail } else { Outcome::Ok };
        let (client, invoked, ops) = (txn.client, txn.invoked, txn.ops);
        Txn {
            client,
            ops,
            outcome,
            invoked,
            completed: now,
        }
    }
}

fn appended_key(op: &MicroOp) -> Option<u32> {
    match op {
        MicroOp::Append { key, .. } => Some(*key),
        MicroOp::Read { .. } => None,
    }
}

/// `n` transactions of `clients` concurrent clients against an [`SiStore`], each step
/// one client's next read, append or commit; then a read of every key.
fn concurrent_si(seed: u64, clients: u32, n: usize, first_committer_wins: bool) -> Vec<Txn> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut store = SiStore {
        lists: vec![Vec::new(); KEYS as usize],
        commits: Vec::new(),
        next: 0,
        first_committer_wins,
    };
    let mut open: Vec<Option<Open>> = (0..clients).map(|_| None).collect();
    let mut history = Vec::new();
    let mut now: Nanos = 0;
    while history.len() < n {
        now += 1;
        let c = rng.gen_range(0..clients);
        let txn = open[c as usize].get_or_insert_with(|| store.begin(c, &mut rng, now));
        if txn.steps_left > 0 {
            store.step(txn, &mut rng);
        } else {
            let txn = open[c as usize].take().expect("open");
            history.push(store.commit(txn, now));
        }
    }
    let ops = (0..KEYS)
        .map(|k| read(k, &store.lists[k as usize]))
        .collect();
    let (invoked, completed) = (now + 1, now + 2);
    let (client, outcome) = (clients, Outcome::Ok);
    history.push(Txn {
        client,
        ops,
        outcome,
        invoked,
        completed,
    });
    history
}

#[test]
fn random_concurrent_si_histories_are_valid_under_si() {
    let mut write_skews = 0;
    for seed in 1..=30 {
        let h = concurrent_si(seed, 4, 120, true);
        let r = check(&h);
        let g2 = r.named("G2-item").count();
        eprintln!(
            "seed {seed}: {} committed of {}, {g2} G2-item",
            r.committed, r.txns
        );
        assert!(r.valid_under_si, "seed {seed}: {r}");
        assert_eq!(r.anomalies.len(), g2, "seed {seed}: {r}");
        write_skews += g2;
    }
    assert!(
        write_skews > 0,
        "no write skew in any run: the test tells nothing"
    );
}

#[test]
fn random_concurrent_histories_without_first_committer_wins_are_not_si() {
    let mut lost_updates = 0;
    for seed in 1..=10 {
        let r = check(&concurrent_si(seed, 4, 120, false));
        eprintln!("seed {seed}: {:?}", r.counts());
        assert!(!r.valid_under_si, "seed {seed}: {r}");
        lost_updates += r.named("lost-update").count();
    }
    assert!(lost_updates > 0, "no lost update in any run");
}
