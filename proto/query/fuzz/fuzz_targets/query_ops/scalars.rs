//! Leaves of the grammar: strings, numbers, dates and document keys.
//!
//! Every enum's first variant is a leaf: when the input runs out, `arbitrary` picks it.

use bson::{Bson, DateTime, Decimal128};
use libfuzzer_sys::arbitrary::{self, Arbitrary};

use crate::tables::{
    pick, ACCUMULATORS, DECIMALS, EXPR_OPS, FIELDS, IDENTS, ODD, QUERY_OPS, SPECIAL, STAGES,
    UPDATE_OPS,
};

/// Keys and patterns cannot hold NUL (BSON C strings).
pub fn no_nul(s: String) -> String {
    if s.contains('\0') {
        s.replace('\0', "")
    } else {
        s
    }
}

#[derive(Arbitrary, Debug)]
pub enum Str {
    Special(u8),
    Odd(Vec<u8>),
    Raw(String),
    SpecialWith(u8, u16, Box<Str>),
    Repeat(u8, u16),
    Chars(Vec<u32>),
}

impl Str {
    pub fn build(&self) -> String {
        match self {
            Str::Special(i) => pick(SPECIAL, *i).to_string(),
            Str::Odd(bytes) => bytes.iter().map(|b| pick(ODD, *b)).collect(),
            Str::Raw(s) => s.clone(),
            Str::SpecialWith(i, pos, extra) => {
                let mut s = pick(SPECIAL, *i).to_string();
                let mut p = (*pos as usize) % (s.len() + 1);
                while !s.is_char_boundary(p) {
                    p -= 1;
                }
                s.insert_str(p, &extra.build());
                s
            }
            Str::Repeat(i, n) => pick(ODD, *i).repeat(*n as usize % 4096),
            Str::Chars(cs) => cs
                .iter()
                .map(|c| char::from_u32(c % 0x11_0000).unwrap_or('\u{fffd}'))
                .collect(),
        }
    }
}

#[derive(Arbitrary, Debug)]
pub enum Num {
    Small(i8),
    Extreme(u8),
    I32(i32),
    I64(i64),
    F64(f64),
    Dec(Dec),
}

#[derive(Arbitrary, Debug)]
pub enum Dec {
    Named(u8),
    Bytes([u8; 16]),
}

impl Dec {
    pub fn build(&self) -> Decimal128 {
        match self {
            Dec::Named(i) => pick(DECIMALS, *i).parse().expect("valid decimal"),
            Dec::Bytes(b) => Decimal128::from_bytes(*b),
        }
    }
}

impl Num {
    pub fn build(&self) -> Bson {
        match self {
            Num::Small(i) => Bson::Int32(*i as i32),
            Num::Extreme(i) => match i % 24 {
                0 => Bson::Int32(i32::MIN),
                1 => Bson::Int32(i32::MAX),
                2 => Bson::Int64(i64::MIN),
                3 => Bson::Int64(i64::MAX),
                4 => Bson::Double(f64::NAN),
                5 => Bson::Double(f64::INFINITY),
                6 => Bson::Double(f64::NEG_INFINITY),
                7 => Bson::Double(-0.0),
                8 => Bson::Double(f64::MAX),
                9 => Bson::Double(f64::MIN_POSITIVE),
                10 => Bson::Double(f64::MIN),
                // i64's bounds as doubles (2^63 and -2^63): just outside and at the edge.
                11 => Bson::Double(i64::MAX as f64),
                12 => Bson::Double(i64::MIN as f64),
                13 => Bson::Double(2147483648.0),
                14 => Bson::Double(0.5),
                15 => Bson::Double(-0.5),
                16 => Bson::Double(4.9e-324),
                17 => Bson::Int64(-1),
                18 => Bson::Int64(2_147_483_648),
                19 => Bson::Int32(64),
                20 => Bson::Int32(63),
                21 => Bson::Double(1e300),
                22 => Bson::Int64(253_402_300_800_000),
                _ => Bson::Decimal128(Dec::Named(*i / 24).build()),
            },
            Num::I32(i) => Bson::Int32(*i),
            Num::I64(i) => Bson::Int64(*i),
            Num::F64(f) => Bson::Double(*f),
            Num::Dec(d) => Bson::Decimal128(d.build()),
        }
    }
}

#[derive(Arbitrary, Debug)]
pub enum DateV {
    Extreme(u8),
    Ms(i64),
}

impl DateV {
    pub fn build(&self) -> DateTime {
        DateTime::from_millis(match self {
            DateV::Extreme(i) => [
                i64::MIN,
                i64::MAX,
                0,
                -1,
                -62_135_596_800_000,
                253_402_300_799_999,
                253_402_300_800_000,
                1_577_836_800_000,
                -62_167_219_200_001,
                951_782_400_000,
                i64::MIN + 1,
                1_700_000_000_000,
            ][*i as usize % 12],
            DateV::Ms(m) => *m,
        })
    }
}

#[derive(Arbitrary, Debug)]
pub enum Key {
    Field(u8),
    Op(u8),
    Raw(Str),
    Ident(u8),
}

impl Key {
    pub fn build(&self) -> String {
        match self {
            Key::Field(i) => pick(FIELDS, *i).to_string(),
            Key::Op(i) => {
                let all = [QUERY_OPS, UPDATE_OPS, EXPR_OPS, STAGES, ACCUMULATORS];
                let t = all[*i as usize % all.len()];
                pick(t, *i / 5).to_string()
            }
            Key::Raw(s) => no_nul(s.build()),
            Key::Ident(i) => pick(IDENTS, *i).to_string(),
        }
    }
}
