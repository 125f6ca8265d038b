//! Field paths: dotted, numeric, positional (`$`, `$[]`, `$[id]`), empty components and
//! paths longer than the server's 200-component limit.

use libfuzzer_sys::arbitrary::{self, Arbitrary};

use crate::scalars::{no_nul, Str};
use crate::tables::{pick, FIELDS, IDENTS};

#[derive(Arbitrary, Debug)]
pub enum Comp {
    Field(u8),
    Num(u32),
    Idx(u8),
    Dollar,
    AllPositional,
    Filtered(u8),
    Raw(Str),
    Empty,
}

impl Comp {
    pub fn build(&self) -> String {
        match self {
            Comp::Field(i) => pick(FIELDS, *i).to_string(),
            Comp::Num(n) => n.to_string(),
            Comp::Idx(i) => (i % 6).to_string(),
            Comp::Dollar => "$".into(),
            Comp::AllPositional => "$[]".into(),
            Comp::Filtered(i) => format!("$[{}]", pick(IDENTS, *i)),
            Comp::Raw(s) => no_nul(s.build()),
            Comp::Empty => String::new(),
        }
    }
}

#[derive(Arbitrary, Debug)]
pub enum Path {
    Field(u8),
    Comps(Vec<Comp>),
    /// `n` components, cycling through the given ones: up to past the 200-component limit.
    Long(u16, Vec<Comp>),
    Raw(Str),
    Numeric(u64),
}

impl Path {
    pub fn build(&self) -> String {
        let s = match self {
            Path::Field(i) => pick(FIELDS, *i).to_string(),
            Path::Comps(cs) if cs.is_empty() => "a".into(),
            Path::Comps(cs) => cs.iter().map(Comp::build).collect::<Vec<_>>().join("."),
            Path::Long(n, cs) => {
                let n = 1 + *n as usize % 420;
                let parts: Vec<String> = if cs.is_empty() {
                    vec!["a".into()]
                } else {
                    cs.iter().map(Comp::build).collect()
                };
                (0..n)
                    .map(|i| parts[i % parts.len()].as_str())
                    .collect::<Vec<_>>()
                    .join(".")
            }
            Path::Raw(s) => s.build(),
            Path::Numeric(n) => format!("a.{n}"),
        };
        no_nul(s)
    }
}
