//! The calendar under the date operators: proleptic Gregorian days, UTC or fixed-offset
//! time zones, `%`-format printing and parsing of date strings.

use std::fmt::Write as _;

use bson::{Bson, DateTime};

use crate::bson_types::type_name;
use crate::{ErrorCode, MongoResult};

use super::convert::type_name_or_missing;
use super::{err, is_nullish};

pub(super) const MS_PER_DAY: i64 = 86_400_000;

pub(super) fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = m as i64;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

pub(super) fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719468;
    let era = z.div_euclid(146097);
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

fn is_leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

pub(super) fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ => {
            if is_leap(y) {
                29
            } else {
                28
            }
        }
    }
}

pub(super) struct Parts {
    pub(super) year: i64,
    pub(super) month: u32,
    pub(super) day: u32,
    pub(super) hour: u32,
    pub(super) minute: u32,
    pub(super) second: u32,
    pub(super) ms: u32,
    /// 0 = Sunday.
    pub(super) dow: u32,
    /// 1-based day of year.
    pub(super) doy: u32,
}

impl Parts {
    pub(super) fn of(local_ms: i64) -> Parts {
        let days = local_ms.div_euclid(MS_PER_DAY);
        let rem = local_ms.rem_euclid(MS_PER_DAY);
        let (year, month, day) = civil_from_days(days);
        Parts {
            year,
            month,
            day,
            hour: (rem / 3_600_000) as u32,
            minute: (rem / 60_000 % 60) as u32,
            second: (rem / 1000 % 60) as u32,
            ms: (rem % 1000) as u32,
            dow: (days + 4).rem_euclid(7) as u32,
            doy: (days - days_from_civil(year, 1, 1) + 1) as u32,
        }
    }

    pub(super) fn iso_dow(&self) -> u32 {
        if self.dow == 0 {
            7
        } else {
            self.dow
        }
    }

    pub(super) fn week_sunday(&self) -> u32 {
        (self.doy - 1 + 7 - self.dow) / 7
    }

    pub(super) fn iso_week(&self) -> (i64, u32) {
        let w = (self.doy as i64 - self.iso_dow() as i64 + 10) / 7;
        if w < 1 {
            (self.year - 1, iso_weeks_in_year(self.year - 1))
        } else if w > iso_weeks_in_year(self.year) as i64 {
            (self.year + 1, 1)
        } else {
            (self.year, w as u32)
        }
    }
}

fn iso_weeks_in_year(y: i64) -> u32 {
    let p = |y: i64| (y + y.div_euclid(4) - y.div_euclid(100) + y.div_euclid(400)).rem_euclid(7);
    if p(y) == 4 || p(y - 1) == 3 {
        53
    } else {
        52
    }
}

/// A time zone: UTC or a fixed offset (Olson names other than UTC are not supported).
pub(super) struct Tz {
    pub(super) offset_ms: i64,
    pub(super) named_utc: bool,
}

impl Tz {
    pub(super) fn offset_at(&self, _ms: i64) -> i64 {
        self.offset_ms
    }
    /// Local time of `ms`; saturates within ~100 hours of the representable range.
    pub(super) fn local(&self, ms: i64) -> i64 {
        ms.saturating_add(self.offset_at(ms))
    }
    pub(super) fn fixed_offset(&self) -> i64 {
        self.offset_ms
    }
    pub(super) fn is_utc(&self) -> bool {
        self.named_utc
    }
}

/// Parses a `timezone` argument; `Ok(None)` means it evaluated to null (result is null).
pub(super) fn timezone_arg(v: Option<Bson>) -> MongoResult<Option<Tz>> {
    let s = match v {
        None => {
            return Ok(Some(Tz {
                offset_ms: 0,
                named_utc: true,
            }))
        }
        Some(x) if is_nullish(&x) => return Ok(None),
        Some(Bson::String(s)) => s,
        Some(x) => {
            return Err(err(
                ErrorCode::TimezoneNotString,
                format!(
                    "timezone must evaluate to a string, found {}",
                    type_name(&x)
                ),
            ))
        }
    };
    match s.as_str() {
        "UTC" | "GMT" | "Z" | "Etc/UTC" | "Etc/GMT" | "Universal" | "Zulu" => {
            return Ok(Some(Tz {
                offset_ms: 0,
                named_utc: true,
            }))
        }
        _ => {}
    }
    match parse_offset(&s) {
        Some(off) => Ok(Some(Tz {
            offset_ms: off,
            named_utc: false,
        })),
        None => Err(err(
            ErrorCode::TimezoneUnknown,
            format!("unrecognized time zone identifier: \"{s}\""),
        )),
    }
}

/// "+hh", "+hhmm", "+hh:mm" (and '-') → offset in ms.
fn parse_offset(s: &str) -> Option<i64> {
    let (sign, rest) = match s.as_bytes().first()? {
        b'+' => (1, &s[1..]),
        b'-' => (-1, &s[1..]),
        _ => return None,
    };
    let digits: String = rest.chars().filter(|c| *c != ':').collect();
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (h, m) = match digits.len() {
        2 => (digits.parse::<i64>().ok()?, 0),
        4 => (
            digits[..2].parse::<i64>().ok()?,
            digits[2..].parse::<i64>().ok()?,
        ),
        _ => return None,
    };
    if m >= 60 {
        return None;
    }
    Some(sign * (h * 3_600_000 + m * 60_000))
}

pub(super) fn date_millis(v: &Bson) -> MongoResult<i64> {
    match v {
        Bson::DateTime(d) => Ok(d.timestamp_millis()),
        Bson::Timestamp(t) => Ok(t.time as i64 * 1000),
        Bson::ObjectId(o) => Ok(o.timestamp().timestamp_millis()),
        x => Err(err(
            ErrorCode::DateConversionFailed,
            format!(
                "can't convert from BSON type {} to Date",
                type_name_or_missing(x)
            ),
        )),
    }
}

const MONTH_NAMES: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

pub(super) fn format_date(fmt: &str, ms: i64, off: i64) -> MongoResult<String> {
    let p = Parts::of(ms.saturating_add(off));
    let mut out = String::with_capacity(fmt.len() + 8);
    let mut chars = fmt.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let Some(spec) = chars.next() else {
            return Err(err(
                ErrorCode::DateFormatTrailingPercent,
                "Unmatched '%' at end of format string",
            ));
        };
        let needs_year = matches!(spec, 'Y' | 'G');
        if needs_year && !(0..=9999).contains(&p.year) {
            return Err(err(
                ErrorCode::DateToStringYearOutOfRange,
                format!(
                    "$dateToString is only defined on year 0-9999, tried to use year {}",
                    p.year
                ),
            ));
        }
        match spec {
            'd' => write!(out, "{:02}", p.day),
            'G' => write!(out, "{:04}", p.iso_week().0),
            'H' => write!(out, "{:02}", p.hour),
            'j' => write!(out, "{:03}", p.doy),
            'L' => write!(out, "{:03}", p.ms),
            'm' => write!(out, "{:02}", p.month),
            'M' => write!(out, "{:02}", p.minute),
            'S' => write!(out, "{:02}", p.second),
            'w' => write!(out, "{}", p.dow + 1),
            'u' => write!(out, "{}", p.iso_dow()),
            'U' => write!(out, "{:02}", p.week_sunday()),
            'V' => write!(out, "{:02}", p.iso_week().1),
            'Y' => write!(out, "{:04}", p.year),
            'b' => write!(out, "{}", &MONTH_NAMES[p.month as usize - 1][..3]),
            'B' => write!(out, "{}", MONTH_NAMES[p.month as usize - 1]),
            'z' => {
                let m = off / 60_000;
                write!(
                    out,
                    "{}{:02}{:02}",
                    if m < 0 { '-' } else { '+' },
                    m.abs() / 60,
                    m.abs() % 60
                )
            }
            'Z' => {
                let m = off / 60_000;
                write!(out, "{}{}", if m < 0 { '-' } else { '+' }, m.abs())
            }
            '%' => write!(out, "%"),
            other => {
                return Err(err(
                    ErrorCode::DateFormatInvalidCharacter,
                    format!("Invalid format character '%{other}' in format string"),
                ))
            }
        }
        .expect("writing to a String cannot fail");
    }
    Ok(out)
}

/// Parses a date string: ISO 8601-like forms by default, or a `%`-format.
pub(super) fn parse_date_string(
    s: &str,
    format: Option<&str>,
    default_off: i64,
) -> Result<DateTime, String> {
    let bad = |why: &str| format!("Error parsing date string '{s}'; {why}");
    let mut f = Fields::default();
    match format {
        Some(fmt) => parse_with_format(s, fmt, &mut f).map_err(|w| bad(&w))?,
        None => parse_iso(s, &mut f).map_err(|w| bad(&w))?,
    }
    if !(1..=12).contains(&f.month) || f.day < 1 || f.day > days_in_month(f.year, f.month) {
        return Err(bad("The parsed date was invalid"));
    }
    if f.hour > 23 || f.minute > 59 || f.second > 59 {
        return Err(bad("The parsed time was invalid"));
    }
    let days = days_from_civil(f.year, f.month, f.day);
    let local = days * MS_PER_DAY
        + f.hour as i64 * 3_600_000
        + f.minute as i64 * 60_000
        + f.second as i64 * 1000
        + f.ms as i64;
    Ok(DateTime::from_millis(
        local - f.offset.unwrap_or(default_off),
    ))
}

struct Fields {
    year: i64,
    month: u32,
    day: u32,
    hour: u32,
    minute: u32,
    second: u32,
    ms: u32,
    offset: Option<i64>,
}

impl Default for Fields {
    fn default() -> Self {
        Fields {
            year: 1970,
            month: 1,
            day: 1,
            hour: 0,
            minute: 0,
            second: 0,
            ms: 0,
            offset: None,
        }
    }
}

struct Scan<'a> {
    b: &'a [u8],
    i: usize,
}

impl Scan<'_> {
    fn num(&mut self, min: usize, max: usize) -> Result<u32, String> {
        let start = self.i;
        while self.i < self.b.len() && self.i - start < max && self.b[self.i].is_ascii_digit() {
            self.i += 1;
        }
        if self.i - start < min {
            return Err("expected a number".into());
        }
        std::str::from_utf8(&self.b[start..self.i])
            .ok()
            .and_then(|d| d.parse().ok())
            .ok_or_else(|| "bad number".into())
    }
    fn eat(&mut self, c: u8) -> bool {
        if self.b.get(self.i) == Some(&c) {
            self.i += 1;
            true
        } else {
            false
        }
    }
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }
    fn done(&self) -> bool {
        self.i >= self.b.len()
    }
    fn offset(&mut self) -> Result<Option<i64>, String> {
        match self.peek() {
            Some(b'Z') => {
                self.i += 1;
                Ok(Some(0))
            }
            Some(b'+') | Some(b'-') => {
                // Candidates are cut by bytes, which may fall inside a multi-byte
                // character of the client's string: such a cut is simply no offset.
                for l in [6usize, 5, 3] {
                    let Some(cand) = self.b.get(self.i..self.i + l) else {
                        continue;
                    };
                    let Ok(cand) = std::str::from_utf8(cand) else {
                        continue;
                    };
                    if let Some(o) = parse_offset(cand) {
                        self.i += l;
                        return Ok(Some(o));
                    }
                }
                Err("invalid time zone offset".into())
            }
            _ => {
                let rest = self.b.get(self.i..).unwrap_or_default();
                let rest = std::str::from_utf8(rest)
                    .map_err(|_| "invalid time zone".to_string())?
                    .trim();
                if rest == "UTC" || rest == "GMT" {
                    self.i = self.b.len();
                    return Ok(Some(0));
                }
                Ok(None)
            }
        }
    }
}

fn parse_iso(s: &str, f: &mut Fields) -> Result<(), String> {
    let mut sc = Scan {
        b: s.trim().as_bytes(),
        i: 0,
    };
    f.year = sc.num(4, 4)? as i64;
    let sep = if sc.eat(b'-') {
        b'-'
    } else if sc.eat(b'/') {
        b'/'
    } else {
        return Err("expected '-'".into());
    };
    f.month = sc.num(1, 2)?;
    if !sc.eat(sep) {
        return Err("expected day".into());
    }
    f.day = sc.num(1, 2)?;
    if sc.eat(b'T') || sc.eat(b' ') || sc.eat(b't') {
        f.hour = sc.num(2, 2)?;
        if !sc.eat(b':') {
            return Err("expected ':'".into());
        }
        f.minute = sc.num(2, 2)?;
        if sc.eat(b':') {
            f.second = sc.num(2, 2)?;
            if sc.eat(b'.') {
                let start = sc.i;
                let frac = sc.num(1, 9)?;
                let len = sc.i - start;
                f.ms = if len >= 3 {
                    frac / 10u32.pow(len as u32 - 3)
                } else {
                    frac * 10u32.pow(3 - len as u32)
                };
            }
        }
        sc.eat(b' ');
        f.offset = sc.offset()?;
    }
    if !sc.done() {
        return Err("trailing data".into());
    }
    Ok(())
}

fn parse_with_format(s: &str, fmt: &str, f: &mut Fields) -> Result<(), String> {
    let mut sc = Scan {
        b: s.as_bytes(),
        i: 0,
    };
    let mut it = fmt.bytes();
    while let Some(c) = it.next() {
        if c != b'%' {
            if !sc.eat(c) {
                return Err(format!("expected '{}'", c as char));
            }
            continue;
        }
        match it.next() {
            Some(b'Y') => f.year = sc.num(4, 4)? as i64,
            Some(b'm') => f.month = sc.num(1, 2)?,
            Some(b'd') => f.day = sc.num(1, 2)?,
            Some(b'H') => f.hour = sc.num(1, 2)?,
            Some(b'M') => f.minute = sc.num(1, 2)?,
            Some(b'S') => f.second = sc.num(1, 2)?,
            Some(b'L') => {
                let start = sc.i;
                let v = sc.num(1, 3)?;
                f.ms = v * 10u32.pow(3 - (sc.i - start) as u32);
            }
            Some(b'j') => {
                let doy = sc.num(1, 3)?;
                let (_, m, d) = civil_from_days(days_from_civil(f.year, 1, 1) + doy as i64 - 1);
                f.month = m;
                f.day = d;
            }
            Some(b'z') | Some(b'Z') => f.offset = sc.offset()?,
            Some(b'%') => {
                if !sc.eat(b'%') {
                    return Err("expected '%'".into());
                }
            }
            Some(other) => {
                return Err(format!("unsupported format character '%{}'", other as char))
            }
            None => return Err("unmatched '%' at end of format string".into()),
        }
    }
    if !sc.done() {
        return Err("trailing data".into());
    }
    Ok(())
}
