//! Structure-aware fuzzing of the `query` crate: filters (`Matcher`), updates
//! (`UpdateSpec`), projections, sorts (and their key-string encoding), aggregation
//! expressions and pipelines, each run against generated documents.
//!
//! The input is a small grammar deriving `Arbitrary` (BSON values of every type, odd UTF-8,
//! extreme numbers, Decimal128, nesting up to the 100-level limit, dotted, numeric,
//! positional and long field paths, operator documents). It is converted to BSON the way a
//! client would send it; anything the server would refuse before calling the query crate
//! (a command nested deeper than `wire::MAX_NESTING_DEPTH`, a document over 16 MiB) is
//! skipped. Errors are fine; a panic, a hang or unbounded memory is a finding.
//!
//! `QUERY_FUZZ_PRINT=1` prints each input as BSON (extended JSON) before running it, for
//! reporting a crash. `QUERY_FUZZ_STACK=<bytes>` runs each input on a thread with that
//! stack (2097152: tokio's blocking threads) instead of the fuzzer's main thread.
//!
//! The grammar's types keep their fields and variants in a fixed order: `arbitrary`
//! decodes by position, so reordering them would change what every corpus input means.
#![no_main]

// The input grammar and its conversion to BSON.
mod exprs;
mod filters;
mod group_stages;
mod input;
mod join_stages;
mod paths;
mod projections;
mod scalars;
mod schema;
mod sorts;
mod stages;
mod tables;
mod updates;
mod values;

// Running an input.
mod cases;
mod limits;
mod print;
mod run;
mod sort_case;
mod update_case;

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;

use crate::input::Input;

fn stack_size() -> Option<usize> {
    static S: OnceLock<Option<usize>> = OnceLock::new();
    *S.get_or_init(|| {
        std::env::var("QUERY_FUZZ_STACK")
            .ok()
            .and_then(|s| s.parse().ok())
    })
}

fuzz_target!(|input: Input| {
    match stack_size() {
        None => run::run(&input),
        Some(size) => std::thread::scope(|s| {
            let h = std::thread::Builder::new()
                .stack_size(size)
                .spawn_scoped(s, || run::run(&input))
                .expect("spawn");
            if let Err(p) = h.join() {
                std::panic::resume_unwind(p);
            }
        }),
    }
});
