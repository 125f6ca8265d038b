//! Decimal128 arithmetic (34 significant digits, round half to even), decoded from and
//! encoded to BSON's `Decimal128`.

use bson::Decimal128;

#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Dec {
    neg: bool,
    coef: u128,
    exp: i32,
    /// 0 finite, 1 infinity, 2 NaN.
    pub(super) special: u8,
}

#[derive(Clone, Copy, PartialEq)]
pub(super) enum Rounding {
    HalfEven,
    Trunc,
    Ceil,
    Floor,
}

const DEC_MAX_COEF: u128 = 10u128.pow(34) - 1;
const DEC_NAN: Dec = Dec {
    neg: false,
    coef: 0,
    exp: 0,
    special: 2,
};

fn pow10(k: u32) -> Option<u128> {
    10u128.checked_pow(k)
}

pub(super) fn digits(mut c: u128) -> u32 {
    let mut n = 1;
    while c >= 10 {
        c /= 10;
        n += 1;
    }
    n
}

/// Drops `k` low digits of `c` with the given rounding; `neg` is the sign for ceil/floor.
fn drop_digits(c: u128, k: u32, mode: Rounding, neg: bool) -> u128 {
    if k == 0 {
        return c;
    }
    let Some(p) = pow10(k) else {
        return match mode {
            Rounding::Ceil if !neg && c != 0 => 1,
            Rounding::Floor if neg && c != 0 => 1,
            _ => 0,
        };
    };
    let (q, r) = (c / p, c % p);
    let up = match mode {
        Rounding::HalfEven => {
            let half = p / 2;
            r > half || (r == half && q % 2 == 1)
        }
        Rounding::Trunc => false,
        Rounding::Ceil => !neg && r != 0,
        Rounding::Floor => neg && r != 0,
    };
    if up {
        q + 1
    } else {
        q
    }
}

impl Dec {
    /// Decodes the BID bits directly (shared with the comparison order), no string round trip.
    pub(crate) fn from_d128(d: &Decimal128) -> Dec {
        match crate::order::decode_decimal(d) {
            crate::order::DecimalParts::NaN => DEC_NAN,
            crate::order::DecimalParts::Infinity { neg } => Dec::infinity(neg),
            crate::order::DecimalParts::Finite { neg, coef, exp } => Dec::finite(neg, coef, exp),
        }
    }

    fn infinity(neg: bool) -> Dec {
        Dec {
            neg,
            coef: 0,
            exp: 0,
            special: 1,
        }
    }

    fn finite(neg: bool, coef: u128, exp: i32) -> Dec {
        Dec {
            neg,
            coef,
            exp,
            special: 0,
        }
    }

    pub(crate) fn parse(s: &str) -> Option<Dec> {
        let s = s.trim();
        let (neg, body) = match s.as_bytes().first()? {
            b'-' => (true, &s[1..]),
            b'+' => (false, &s[1..]),
            _ => (false, s),
        };
        let lower = body.to_ascii_lowercase();
        if lower == "nan" {
            return Some(DEC_NAN);
        }
        if lower == "inf" || lower == "infinity" {
            return Some(Dec::infinity(neg));
        }
        let (mant, exp_part) = match lower.find('e') {
            Some(i) => (&lower[..i], Some(&lower[i + 1..])),
            None => (lower.as_str(), None),
        };
        let mut exp: i64 = match exp_part {
            Some(e) => e.parse().ok()?,
            None => 0,
        };
        let mut coef: u128 = 0;
        let mut seen_digit = false;
        let mut seen_dot = false;
        let mut dropped = 0i64;
        let mut tail: Vec<u8> = Vec::new();
        for ch in mant.bytes() {
            match ch {
                b'0'..=b'9' => {
                    seen_digit = true;
                    if coef <= DEC_MAX_COEF / 10 * 10 && coef < 10u128.pow(37) {
                        coef = coef * 10 + (ch - b'0') as u128;
                        if seen_dot {
                            exp -= 1;
                        }
                    } else {
                        tail.push(ch);
                        if !seen_dot {
                            dropped += 1;
                        }
                    }
                }
                b'.' if !seen_dot => seen_dot = true,
                _ => return None,
            }
        }
        if !seen_digit {
            return None;
        }
        exp += dropped;
        if !tail.is_empty() && tail[0] >= b'5' {
            coef += 1;
        }
        let exp = exp.clamp(-100_000, 100_000) as i32;
        Some(Dec::finite(neg, coef, exp).normalize(Rounding::HalfEven))
    }

    fn normalize(mut self, mode: Rounding) -> Dec {
        if self.special != 0 {
            return self;
        }
        if self.coef > DEC_MAX_COEF {
            let k = digits(self.coef) - 34;
            self.coef = drop_digits(self.coef, k, mode, self.neg);
            self.exp += k as i32;
            if self.coef > DEC_MAX_COEF {
                self.coef /= 10;
                self.exp += 1;
            }
        }
        if self.exp < -6176 {
            let k = (-6176 - self.exp) as u32;
            self.coef = drop_digits(self.coef, k, mode, self.neg);
            self.exp = -6176;
        }
        while self.exp > 6111 && self.coef != 0 && self.coef * 10 <= DEC_MAX_COEF {
            self.coef *= 10;
            self.exp -= 1;
        }
        if self.exp > 6111 {
            if self.coef == 0 {
                self.exp = 6111;
            } else {
                return Dec::infinity(self.neg);
            }
        }
        self
    }

    pub(crate) fn to_d128(self) -> Decimal128 {
        let s = match self.special {
            2 => "NaN".to_string(),
            1 => if self.neg { "-Infinity" } else { "Infinity" }.to_string(),
            _ => {
                let d = self.normalize(Rounding::HalfEven);
                if d.special != 0 {
                    return d.to_d128();
                }
                format!("{}{}E{}", if d.neg { "-" } else { "" }, d.coef, d.exp)
            }
        };
        s.parse().unwrap_or_else(|_| "NaN".parse().unwrap())
    }

    pub(crate) fn from_i64(i: i64) -> Dec {
        Dec::finite(i < 0, i.unsigned_abs() as u128, 0)
    }

    /// A double as MongoDB converts it: rounded to 15 significant digits.
    pub(crate) fn from_f64(f: f64) -> Dec {
        if f.is_nan() {
            return DEC_NAN;
        }
        if f.is_infinite() {
            return Dec::infinity(f < 0.0);
        }
        if f == 0.0 {
            return Dec::finite(f.is_sign_negative(), 0, 0);
        }
        Dec::parse(&format!("{:.14e}", f)).unwrap_or(DEC_NAN)
    }

    pub(crate) fn to_f64(self) -> f64 {
        match self.special {
            2 => f64::NAN,
            1 => {
                if self.neg {
                    f64::NEG_INFINITY
                } else {
                    f64::INFINITY
                }
            }
            _ => format!(
                "{}{}e{}",
                if self.neg { "-" } else { "" },
                self.coef,
                self.exp
            )
            .parse()
            .unwrap_or(f64::NAN),
        }
    }

    /// The same value with the sign cleared (NaN and infinities included).
    pub(super) fn abs(self) -> Dec {
        Dec { neg: false, ..self }
    }

    pub(crate) fn is_zero(&self) -> bool {
        self.special == 0 && self.coef == 0
    }

    pub(super) fn is_nan(&self) -> bool {
        self.special == 2
    }

    pub(crate) fn to_i64_exact(self) -> Option<i64> {
        if self.special != 0 {
            return None;
        }
        let mag: u128 = if self.exp >= 0 {
            self.coef.checked_mul(pow10(self.exp as u32)?)?
        } else {
            let p = pow10((-self.exp) as u32).unwrap_or(u128::MAX);
            if !self.coef.is_multiple_of(p) {
                return None;
            }
            self.coef / p
        };
        let v = i128::try_from(mag).ok()?;
        i64::try_from(if self.neg { -v } else { v }).ok()
    }

    /// Truncated integer value, if it fits an i64.
    pub(crate) fn to_i64_trunc(self) -> Option<i64> {
        self.round(0, Rounding::Trunc).to_i64_exact()
    }

    fn signed(&self) -> i128 {
        if self.neg {
            -(self.coef as i128)
        } else {
            self.coef as i128
        }
    }

    fn special_add(&self, o: &Dec) -> Option<Dec> {
        if self.is_nan() || o.is_nan() {
            return Some(DEC_NAN);
        }
        match (self.special, o.special) {
            (1, 1) if self.neg != o.neg => Some(DEC_NAN),
            (1, _) => Some(*self),
            (_, 1) => Some(*o),
            _ => None,
        }
    }

    /// Brings both operands to a common exponent, rounding the smaller one if needed.
    fn align(mut a: Dec, mut b: Dec) -> (Dec, Dec) {
        const CAP: u128 = 1_000_000_000_000_000_000_000_000_000_000_000_000; // 1e36
        if a.exp < b.exp {
            let (x, y) = Dec::align(b, a);
            return (y, x);
        }
        // now a.exp >= b.exp: scale a up, or b down.
        while a.exp > b.exp {
            if a.coef == 0 {
                a.exp = b.exp;
                break;
            }
            if a.coef * 10 < CAP {
                a.coef *= 10;
                a.exp -= 1;
            } else {
                let k = (a.exp - b.exp) as u32;
                b.coef = drop_digits(b.coef, k, Rounding::HalfEven, b.neg);
                b.exp = a.exp;
            }
        }
        (a, b)
    }

    pub(crate) fn add(&self, o: &Dec) -> Dec {
        if let Some(s) = self.special_add(o) {
            return s;
        }
        let (a, b) = Dec::align(*self, *o);
        let sum = a.signed() + b.signed();
        let neg = if sum == 0 { a.neg && b.neg } else { sum < 0 };
        Dec::finite(neg, sum.unsigned_abs(), a.exp).normalize(Rounding::HalfEven)
    }

    pub(crate) fn sub(&self, o: &Dec) -> Dec {
        let mut neg_o = *o;
        if neg_o.special != 2 {
            neg_o.neg = !neg_o.neg;
        }
        self.add(&neg_o)
    }

    pub(crate) fn mul(&self, o: &Dec) -> Dec {
        if self.is_nan() || o.is_nan() {
            return DEC_NAN;
        }
        let neg = self.neg != o.neg;
        if self.special == 1 || o.special == 1 {
            if self.is_zero() || o.is_zero() {
                return DEC_NAN;
            }
            return Dec::infinity(neg);
        }
        let (mut a, mut b) = (*self, *o);
        if a.coef.checked_mul(b.coef).is_none() {
            for x in [&mut a, &mut b] {
                let d = digits(x.coef);
                if d > 19 {
                    x.coef = drop_digits(x.coef, d - 19, Rounding::HalfEven, x.neg);
                    x.exp += (d - 19) as i32;
                }
            }
        }
        Dec::finite(neg, a.coef * b.coef, a.exp + b.exp).normalize(Rounding::HalfEven)
    }

    pub(crate) fn div(&self, o: &Dec) -> Dec {
        if self.is_nan() || o.is_nan() {
            return DEC_NAN;
        }
        let neg = self.neg != o.neg;
        match (self.special, o.special) {
            (1, 1) => return DEC_NAN,
            (1, _) => return Dec::infinity(neg),
            (_, 1) => return Dec::finite(neg, 0, 0),
            _ => {}
        }
        if o.coef == 0 {
            if self.coef == 0 {
                return DEC_NAN;
            }
            return Dec::infinity(neg);
        }
        let mut exp = self.exp - o.exp;
        let mut q = self.coef / o.coef;
        let mut r = self.coef % o.coef;
        while r != 0 && q <= DEC_MAX_COEF / 10 {
            r *= 10;
            q = q * 10 + r / o.coef;
            r %= o.coef;
            exp -= 1;
        }
        if r != 0 {
            // one more digit decides the rounding
            let next = (r * 10) / o.coef;
            let rest = (r * 10) % o.coef;
            if next > 5 || (next == 5 && (rest != 0 || q % 2 == 1)) {
                q += 1;
            }
        }
        Dec::finite(neg, q, exp).normalize(Rounding::HalfEven)
    }

    pub(crate) fn rem(&self, o: &Dec) -> Dec {
        if self.special != 0 || o.special != 0 || o.coef == 0 {
            return DEC_NAN;
        }
        let (a, b) = Dec::align(*self, *o);
        if a.exp != b.exp || b.coef == 0 {
            return Dec::from_f64(self.to_f64() % o.to_f64());
        }
        Dec::finite(self.neg, a.coef % b.coef, a.exp).normalize(Rounding::HalfEven)
    }

    /// Rounds to `place` digits after the decimal point (negative: before it).
    pub(super) fn round(&self, place: i32, mode: Rounding) -> Dec {
        if self.special != 0 {
            return *self;
        }
        let target = -place;
        if self.exp >= target {
            return *self;
        }
        let k = (target - self.exp) as u32;
        Dec::finite(self.neg, drop_digits(self.coef, k, mode, self.neg), target)
            .normalize(Rounding::HalfEven)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal_bits_decode_like_their_text() {
        for text in [
            "0",
            "-0",
            "1.0",
            "123.4500",
            "-9.999999999999999999999999999999999E+6144",
            "1E-6176",
            "NaN",
            "Infinity",
            "-Infinity",
            "42",
        ] {
            let d: bson::Decimal128 = text.parse().unwrap();
            let from_bits = Dec::from_d128(&d);
            let from_text = Dec::parse(&d.to_string()).unwrap();
            assert_eq!(
                from_bits.to_d128().to_string(),
                from_text.to_d128().to_string(),
                "{text}"
            );
        }
    }

    #[test]
    fn decimal_arithmetic() {
        let d = |s: &str| Dec::parse(s).unwrap();
        assert_eq!(d("1.1").add(&d("2.2")).to_d128().to_string(), "3.3");
        assert_eq!(d("1E+3").add(&d("1")).to_d128().to_string(), "1001");
        assert_eq!(d("0.1").mul(&d("0.2")).to_d128().to_string(), "0.02");
        assert_eq!(d("7").rem(&d("3")).to_d128().to_string(), "1");
        assert_eq!(
            d("-7.5").round(0, Rounding::HalfEven).to_d128().to_string(),
            "-8"
        );
        assert_eq!(d("2").sub(&d("2")).to_d128().to_string(), "0");
        assert_eq!(d("123.4500").to_i64_exact(), None);
        assert_eq!(d("1.2E+2").to_i64_exact(), Some(120));
        assert_eq!(
            Dec::from_f64(0.1).to_d128().to_string(),
            "0.100000000000000"
        );
    }
}
