//! `QUERY_FUZZ_PRINT=1`: each input printed as BSON (extended JSON) before it runs, for
//! reporting a crash.

use std::sync::OnceLock;

use bson::Bson;

pub fn print_enabled() -> bool {
    static P: OnceLock<bool> = OnceLock::new();
    *P.get_or_init(|| std::env::var_os("QUERY_FUZZ_PRINT").is_some())
}

pub fn show(what: &str, v: &Bson) {
    if print_enabled() {
        eprintln!("{what}: {}", v.clone().into_relaxed_extjson());
    }
}
