//! Date operators.

use bson::{Bson, DateTime};

use crate::bson_types::type_name;
use crate::{ErrorCode, MongoError, MongoResult};

use super::arith::as_int_exact;
use super::calendar::{
    date_millis, days_from_civil, days_in_month, format_date, parse_date_string, timezone_arg,
    Parts, Tz, MS_PER_DAY,
};
use super::convert::{conversion_failure, type_name_or_missing};
use super::eval::Args;
use super::ops::Op;
use super::{err, is_nullish};

#[inline(never)]
pub(super) fn named_date_to_string(a: &mut Args) -> MongoResult<Bson> {
    let date = a.req(0)?;
    if is_nullish(&date) {
        return a.on_null(3);
    }
    let format = match a.arg(1)? {
        None => None,
        Some(Bson::String(s)) => Some(s),
        Some(x) if is_nullish(&x) => return Ok(Bson::Null),
        Some(x) => {
            return Err(err(
                ErrorCode::DateToStringFormatNotString,
                format!(
                    "$dateToString requires that 'format' be a string, found: {} with value {x}",
                    type_name(&x)
                ),
            ))
        }
    };
    let Some(tz) = timezone_arg(a.arg(2)?)? else {
        return Ok(Bson::Null);
    };
    let ms = date_millis(&date)?;
    let off = tz.offset_at(ms);
    let fmt = format.as_deref().unwrap_or(if tz.is_utc() {
        "%Y-%m-%dT%H:%M:%S.%LZ"
    } else {
        "%Y-%m-%dT%H:%M:%S.%L"
    });
    Ok(Bson::String(format_date(fmt, ms, off)?))
}

#[inline(never)]
pub(super) fn named_date_from_string(a: &mut Args) -> MongoResult<Bson> {
    let s = a.req(0)?;
    let s = match s {
        Bson::String(s) => s,
        x if is_nullish(&x) => return a.on_null(4),
        x => {
            let e = conversion_failure(format!(
                "$dateFromString requires that 'dateString' be a string, found: {} with value {x}",
                type_name(&x)
            ));
            return a.on_error(3, e);
        }
    };
    let format = match a.arg(1)? {
        None => None,
        Some(Bson::String(f)) => Some(f),
        Some(x) if is_nullish(&x) => return Ok(Bson::Null),
        Some(x) => {
            return Err(err(
                ErrorCode::DateFromStringFormatNotString,
                format!(
                    "$dateFromString requires that 'format' be a string, found: {}",
                    type_name(&x)
                ),
            ))
        }
    };
    let Some(tz) = timezone_arg(a.arg(2)?)? else {
        return Ok(Bson::Null);
    };
    match parse_date_string(&s, format.as_deref(), tz.fixed_offset()) {
        Ok(d) => Ok(Bson::DateTime(d)),
        Err(msg) => a.on_error(3, conversion_failure(msg)),
    }
}

#[inline(never)]
pub(super) fn named_date_to_parts(a: &mut Args) -> MongoResult<Bson> {
    let date = a.req(0)?;
    if is_nullish(&date) {
        return Ok(Bson::Null);
    }
    let Some(tz) = timezone_arg(a.arg(1)?)? else {
        return Ok(Bson::Null);
    };
    let iso = match a.arg(2)? {
        None => false,
        Some(Bson::Boolean(b)) => b,
        Some(x) if is_nullish(&x) => return Ok(Bson::Null),
        Some(x) => {
            return Err(err(
                ErrorCode::Iso8601NotBool,
                format!("iso8601 must evaluate to a bool, found {}", type_name(&x)),
            ))
        }
    };
    let ms = date_millis(&date)?;
    let p = Parts::of(tz.local(ms));
    Ok(Bson::Document(if iso {
        let (wy, w) = p.iso_week();
        bson::doc! {"isoWeekYear": wy as i32, "isoWeek": w as i32, "isoDayOfWeek": p.iso_dow() as i32,
        "hour": p.hour as i32, "minute": p.minute as i32, "second": p.second as i32, "millisecond": p.ms as i32}
    } else {
        bson::doc! {"year": p.year as i32, "month": p.month as i32, "day": p.day as i32,
        "hour": p.hour as i32, "minute": p.minute as i32, "second": p.second as i32, "millisecond": p.ms as i32}
    }))
}

#[inline(never)]
pub(super) fn named_date_add(a: &mut Args) -> MongoResult<Bson> {
    let name = a.name();
    let start = a.req(0)?;
    let unit = a.req(1)?;
    let amount = a.req(2)?;
    let tz = a.arg(3)?;
    if is_nullish(&start) || is_nullish(&unit) || is_nullish(&amount) {
        return Ok(Bson::Null);
    }
    let Some(tz) = timezone_arg(tz)? else {
        return Ok(Bson::Null);
    };
    let ms = date_millis(&start)?;
    let unit = time_unit(name, &unit)?;
    let Some(mut amount) = as_int_exact(&amount) else {
        return Err(err(
            ErrorCode::DateAddAmountNotIntegral,
            format!("{name} expects integer amount of time units"),
        ));
    };
    if a.op == Op::DateSubtract {
        // i64::MIN cannot be negated (mongod: 6045000).
        amount = amount.checked_neg().ok_or_else(|| {
            err(
                ErrorCode::DateSubtractAmountInvalid,
                format!("invalid $dateSubtract 'amount' parameter value: {amount}"),
            )
        })?;
    }
    Ok(Bson::DateTime(DateTime::from_millis(date_add(
        ms, unit, amount, &tz,
    )?)))
}

#[inline(never)]
pub(super) fn named_date_diff(a: &mut Args) -> MongoResult<Bson> {
    let name = a.name();
    let start = a.req(0)?;
    let end = a.req(1)?;
    let unit = a.req(2)?;
    let tz = a.arg(3)?;
    let sow = a.arg(4)?;
    if is_nullish(&start) || is_nullish(&end) || is_nullish(&unit) {
        return Ok(Bson::Null);
    }
    let Some(tz) = timezone_arg(tz)? else {
        return Ok(Bson::Null);
    };
    let (s, e) = (date_millis(&start)?, date_millis(&end)?);
    let unit = time_unit(name, &unit)?;
    let sow = start_of_week(sow)?;
    Ok(Bson::Int64(date_diff(s, e, unit, &tz, sow)?))
}

#[inline(never)]
pub(super) fn named_date_trunc(a: &mut Args) -> MongoResult<Bson> {
    let name = a.name();
    let date = a.req(0)?;
    let unit = a.req(1)?;
    let bin = a.arg(2)?;
    let tz = a.arg(3)?;
    let sow = a.arg(4)?;
    if is_nullish(&date) || is_nullish(&unit) {
        return Ok(Bson::Null);
    }
    let Some(tz) = timezone_arg(tz)? else {
        return Ok(Bson::Null);
    };
    let ms = date_millis(&date)?;
    let unit = time_unit(name, &unit)?;
    let bin = match bin {
        None => 1,
        Some(b) if is_nullish(&b) => return Ok(Bson::Null),
        Some(b) => match as_int_exact(&b) {
            Some(n) if n > 0 => n,
            _ => return Err(err(ErrorCode::DateTruncBinSizeInvalid, format!("$dateTrunc requires 'binSize' to be a positive 64-bit integer, but got value '{b}'"))),
        },
    };
    let sow = start_of_week(sow)?;
    Ok(Bson::DateTime(DateTime::from_millis(date_trunc(
        ms, unit, bin, &tz, sow,
    )?)))
}

#[inline(never)]
pub(super) fn named_date_part(a: &mut Args) -> MongoResult<Bson> {
    let date = a.req(0)?;
    if is_nullish(&date) {
        return Ok(Bson::Null);
    }
    let Some(tz) = timezone_arg(a.arg(1)?)? else {
        return Ok(Bson::Null);
    };
    let ms = date_millis(&date)?;
    let p = Parts::of(tz.local(ms));
    let v = match a.op {
        Op::Year => p.year as i32,
        Op::Month => p.month as i32,
        Op::DayOfMonth => p.day as i32,
        Op::Hour => p.hour as i32,
        Op::Minute => p.minute as i32,
        Op::Second => p.second as i32,
        Op::Millisecond => p.ms as i32,
        Op::DayOfWeek => p.dow as i32 + 1,
        Op::DayOfYear => p.doy as i32,
        Op::Week => p.week_sunday() as i32,
        Op::IsoWeek => p.iso_week().1 as i32,
        Op::IsoWeekYear => p.iso_week().0 as i32,
        _ => p.iso_dow() as i32,
    };
    Ok(Bson::Int32(v))
}

#[inline(never)]
pub(super) fn date_from_parts(a: &mut Args) -> MongoResult<Bson> {
    // The table's parameters: the ten parts, then "timezone".
    let (names, _) = a.op.named_params();
    let mut vals: [Option<i64>; 10] = [None; 10];
    for i in 0..10 {
        if let Some(v) = a.arg(i)? {
            if is_nullish(&v) {
                return Ok(Bson::Null);
            }
            match as_int_exact(&v) {
                Some(n) => vals[i] = Some(n),
                None => {
                    return Err(err(
                        ErrorCode::DatePartNotInteger,
                        format!(
                            "'{}' must evaluate to an integer, found {} with value {v}",
                            names[i],
                            type_name(&v)
                        ),
                    ))
                }
            }
        }
    }
    let tz = match a.arg(10)? {
        Some(v) => match timezone_arg(Some(v))? {
            Some(tz) => tz,
            None => return Ok(Bson::Null),
        },
        None => Tz {
            offset_ms: 0,
            named_utc: true,
        },
    };
    let natural = vals[..7].iter().any(Option::is_some) && vals[0].is_some();
    let iso = vals[7..].iter().any(Option::is_some);
    if vals[0].is_some() && iso {
        return Err(err(
            ErrorCode::DateFromPartsMixesIsoDates,
            "$dateFromParts does not allow mixing natural dates with ISO dates",
        ));
    }
    if vals[0].is_none() && vals[7].is_none() {
        return Err(err(
            ErrorCode::DateFromPartsMissingYear,
            "$dateFromParts requires either 'year' or 'isoWeekYear' to be present",
        ));
    }
    let year = vals[0].or(vals[7]).unwrap();
    if !(1..=9999).contains(&year) {
        let n = if natural { "year" } else { "isoWeekYear" };
        return Err(err(
            ErrorCode::DateFromPartsYearOutOfRange,
            format!("'{n}' must evaluate to an integer in the range 1 to 9999, found {year}"),
        ));
    }
    for (i, v) in vals.iter().enumerate().skip(1) {
        if let Some(v) = v {
            if !(-32768..=32767).contains(v) {
                return Err(err(ErrorCode::DatePartOutOfRange, format!("'{}' must evaluate to a value in the range [-32768, 32767]; value {v} is not in range", names[i])));
            }
        }
    }
    let time = vals[3].unwrap_or(0) * 3_600_000
        + vals[4].unwrap_or(0) * 60_000
        + vals[5].unwrap_or(0) * 1000
        + vals[6].unwrap_or(0);
    let days = if iso {
        let jan4 = days_from_civil(year, 1, 4);
        let jan4_iso_dow = ((jan4 + 4).rem_euclid(7) + 6) % 7 + 1;
        let monday = jan4 - (jan4_iso_dow - 1);
        monday + (vals[8].unwrap_or(1) - 1) * 7 + vals[9].unwrap_or(1) - 1
    } else {
        let months = year * 12 + vals[1].unwrap_or(1) - 1;
        let (y, m) = (months.div_euclid(12), months.rem_euclid(12) as u32 + 1);
        days_from_civil(y, m, 1) + vals[2].unwrap_or(1) - 1
    };
    Ok(Bson::DateTime(DateTime::from_millis(
        days * MS_PER_DAY + time - tz.fixed_offset(),
    )))
}

#[derive(Clone, Copy, PartialEq)]
enum Unit {
    Year,
    Quarter,
    Month,
    Week,
    Day,
    Hour,
    Minute,
    Second,
    Millisecond,
}

fn time_unit(name: &str, v: &Bson) -> MongoResult<Unit> {
    let Bson::String(s) = v else {
        return Err(err(
            ErrorCode::DateUnitNotString,
            format!(
                "{name} requires 'unit' to be a string, but got {}",
                type_name(v)
            ),
        ));
    };
    Ok(match s.as_str() {
        "year" => Unit::Year,
        "quarter" => Unit::Quarter,
        "month" => Unit::Month,
        "week" => Unit::Week,
        "day" => Unit::Day,
        "hour" => Unit::Hour,
        "minute" => Unit::Minute,
        "second" => Unit::Second,
        "millisecond" => Unit::Millisecond,
        other => {
            return Err(err(
                ErrorCode::DateUnitUnknown,
                format!(
                    "{name} parameter 'unit' value cannot be recognized as a time unit: {other}"
                ),
            ))
        }
    })
}

fn start_of_week(v: Option<Bson>) -> MongoResult<i64> {
    let Some(v) = v else { return Ok(0) };
    let Bson::String(s) = &v else {
        return Err(err(
            ErrorCode::StartOfWeekNotString,
            format!(
                "startOfWeek must be a string, found {}",
                type_name_or_missing(&v)
            ),
        ));
    };
    let days = [
        "sunday",
        "monday",
        "tuesday",
        "wednesday",
        "thursday",
        "friday",
        "saturday",
    ];
    let l = s.to_ascii_lowercase();
    days.iter()
        .position(|d| *d == l || d[..3] == l)
        .map(|p| p as i64)
        .ok_or_else(|| {
            err(
                ErrorCode::StartOfWeekUnknown,
                format!("unknown day of week: {s}"),
            )
        })
}

fn fixed_unit_ms(u: Unit) -> Option<i64> {
    Some(match u {
        Unit::Week => 7 * MS_PER_DAY,
        Unit::Day => MS_PER_DAY,
        Unit::Hour => 3_600_000,
        Unit::Minute => 60_000,
        Unit::Second => 1000,
        Unit::Millisecond => 1,
        _ => return None,
    })
}

fn months_of(u: Unit) -> i64 {
    match u {
        Unit::Year => 12,
        Unit::Quarter => 3,
        _ => 1,
    }
}

fn date_add(ms: i64, unit: Unit, amount: i64, tz: &Tz) -> MongoResult<i64> {
    let overflow = || err(ErrorCode::DateAddOverflow, "$dateAdd overflowed");
    if let Some(u) = fixed_unit_ms(unit) {
        return amount
            .checked_mul(u)
            .and_then(|d| ms.checked_add(d))
            .ok_or_else(overflow);
    }
    let off = tz.offset_at(ms);
    let local = tz.local(ms);
    let p = Parts::of(local);
    let months = amount.checked_mul(months_of(unit)).ok_or_else(overflow)?;
    let total = (p.year * 12 + p.month as i64 - 1)
        .checked_add(months)
        .ok_or_else(overflow)?;
    let (y, m) = (total.div_euclid(12), total.rem_euclid(12) as u32 + 1);
    if !(-300_000..=300_000).contains(&y) {
        return Err(overflow());
    }
    let d = p.day.min(days_in_month(y, m));
    let time = local.rem_euclid(MS_PER_DAY);
    Ok(days_from_civil(y, m, d) * MS_PER_DAY + time - off)
}

fn date_diff(s: i64, e: i64, unit: Unit, tz: &Tz, sow: i64) -> MongoResult<i64> {
    let (ls, le) = (tz.local(s), tz.local(e));
    Ok(match unit {
        Unit::Millisecond => le
            .checked_sub(ls)
            .ok_or_else(|| err(ErrorCode::DateDiffOverflow, "dateDiff overflowed"))?,
        Unit::Week => {
            let w = |l: i64| (l.div_euclid(MS_PER_DAY) + 4 - sow).div_euclid(7);
            w(le) - w(ls)
        }
        u if fixed_unit_ms(u).is_some() => {
            let k = fixed_unit_ms(u).unwrap();
            le.div_euclid(k) - ls.div_euclid(k)
        }
        _ => {
            let (a, b) = (Parts::of(ls), Parts::of(le));
            let (ma, mb) = (
                a.year * 12 + a.month as i64 - 1,
                b.year * 12 + b.month as i64 - 1,
            );
            match unit {
                Unit::Month => mb - ma,
                Unit::Quarter => mb.div_euclid(3) - ma.div_euclid(3),
                _ => b.year - a.year,
            }
        }
    })
}

fn date_trunc(ms: i64, unit: Unit, bin: i64, tz: &Tz, sow: i64) -> MongoResult<i64> {
    // In i128: a huge binSize or a date near the ends of the range must not overflow.
    let off = tz.offset_at(ms) as i128;
    let local = ms as i128 + off;
    let bin = bin as i128;
    const REF_2000: i128 = 946_684_800_000;
    let day = MS_PER_DAY as i128;
    let truncated = match unit {
        Unit::Week => {
            // The first `startOfWeek` day on or after 2000-01-01 (a Saturday).
            let reference = REF_2000 + (sow as i128 - 6).rem_euclid(7) * day;
            let size = 7 * day * bin;
            reference + (local - reference).div_euclid(size) * size
        }
        u if fixed_unit_ms(u).is_some() => {
            let size = fixed_unit_ms(u).unwrap_or(1) as i128 * bin;
            REF_2000 + (local - REF_2000).div_euclid(size) * size
        }
        _ => {
            let p = Parts::of(tz.local(ms));
            let months = (p.year as i128 - 2000) * 12 + p.month as i128 - 1;
            let step = months_of(unit) as i128 * bin;
            let t = months.div_euclid(step) * step + 2000 * 12;
            let year = t.div_euclid(12);
            if !(-300_000_000..=300_000_000).contains(&year) {
                return Err(date_trunc_overflow());
            }
            days_from_civil(year as i64, t.rem_euclid(12) as u32 + 1, 1) as i128 * day
        }
    };
    i64::try_from(truncated - off).map_err(|_| date_trunc_overflow())
}

fn date_trunc_overflow() -> MongoError {
    MongoError::new(ErrorCode::Overflow, "$dateTrunc overflowed")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expr::calendar::civil_from_days;
    use crate::expr::test_support::*;
    use bson::bson;
    #[test]
    fn dates() {
        // 2023-11-14T22:13:20.123Z is a Tuesday, day 318 of the year.
        check(vec![
            (bson!({"$year": "$d"}), bson!(2023)),
            (bson!({"$month": "$d"}), bson!(11)),
            (bson!({"$dayOfMonth": "$d"}), bson!(14)),
            (bson!({"$hour": "$d"}), bson!(22)),
            (bson!({"$minute": "$d"}), bson!(13)),
            (bson!({"$second": "$d"}), bson!(20)),
            (bson!({"$millisecond": "$d"}), bson!(123)),
            (bson!({"$dayOfWeek": "$d"}), bson!(3)),
            (bson!({"$dayOfYear": "$d"}), bson!(318)),
            (bson!({"$isoDayOfWeek": "$d"}), bson!(2)),
            (bson!({"$isoWeek": "$d"}), bson!(46)),
            (bson!({"$week": "$d"}), bson!(46)),
            (
                bson!({"$hour": {"date": "$d", "timezone": "+02:00"}}),
                bson!(0),
            ),
            (
                bson!({"$dayOfMonth": {"date": "$d", "timezone": "-0300"}}),
                bson!(14),
            ),
            (bson!({"$year": ["$d"]}), bson!(2023)),
            (bson!({"$year": "$missing"}), Bson::Null),
            (
                bson!({"$dateToString": {"date": "$d"}}),
                bson!("2023-11-14T22:13:20.123Z"),
            ),
            (
                bson!({"$dateToString": {"date": "$d", "format": "%Y/%m/%d %H:%M %j %%"}}),
                bson!("2023/11/14 22:13 318 %"),
            ),
            (
                bson!({"$dateToString": {"date": "$d", "format": "%H:%M%z", "timezone": "+05:30"}}),
                bson!("03:43+0530"),
            ),
            (
                bson!({"$dateToString": {"date": "$missing", "onNull": "none"}}),
                bson!("none"),
            ),
            (
                bson!({"$dateFromString": {"dateString": "2023-11-14"}}),
                Bson::DateTime(DateTime::from_millis(1_699_920_000_000)),
            ),
            (
                bson!({"$dateFromString": {"dateString": "2023-11-14T22:13:20.123Z"}}),
                Bson::DateTime(DateTime::from_millis(1_700_000_000_123)),
            ),
            (
                bson!({"$dateFromString": {"dateString": "2023-11-15T00:13:20.123+02:00"}}),
                Bson::DateTime(DateTime::from_millis(1_700_000_000_123)),
            ),
            (
                bson!({"$dateFromString": {"dateString": "14/11/2023", "format": "%d/%m/%Y"}}),
                Bson::DateTime(DateTime::from_millis(1_699_920_000_000)),
            ),
            (
                bson!({"$dateFromString": {"dateString": "garbage", "onError": "bad"}}),
                bson!("bad"),
            ),
            (
                bson!({"$dateFromString": {"dateString": null, "onNull": 0}}),
                bson!(0),
            ),
            (
                bson!({"$dateFromParts": {"year": 2023, "month": 11, "day": 14}}),
                Bson::DateTime(DateTime::from_millis(1_699_920_000_000)),
            ),
            (
                bson!({"$dateFromParts": {"year": 2023, "month": 14, "day": 1}}),
                Bson::DateTime(DateTime::from_millis(
                    days_from_civil(2024, 2, 1) * MS_PER_DAY,
                )),
            ),
            (
                bson!({"$dateToParts": {"date": "$d"}}),
                bson!({"year": 2023, "month": 11, "day": 14, "hour": 22, "minute": 13, "second": 20, "millisecond": 123}),
            ),
            (
                bson!({"$dateAdd": {"startDate": DateTime::from_millis(days_from_civil(2023, 1, 31) * MS_PER_DAY), "unit": "month", "amount": 1}}),
                Bson::DateTime(DateTime::from_millis(
                    days_from_civil(2023, 2, 28) * MS_PER_DAY,
                )),
            ),
            (
                bson!({"$dateSubtract": {"startDate": "$d", "unit": "hour", "amount": 22}}),
                Bson::DateTime(DateTime::from_millis(1_700_000_000_123 - 22 * 3_600_000)),
            ),
            (
                bson!({"$dateDiff": {"startDate": DateTime::from_millis(days_from_civil(2022, 12, 31) * MS_PER_DAY), "endDate": "$d", "unit": "year"}}),
                bson!(1i64),
            ),
            (
                bson!({"$dateTrunc": {"date": "$d", "unit": "day"}}),
                Bson::DateTime(DateTime::from_millis(1_699_920_000_000)),
            ),
            (
                bson!({"$dateTrunc": {"date": "$d", "unit": "month"}}),
                Bson::DateTime(DateTime::from_millis(
                    days_from_civil(2023, 11, 1) * MS_PER_DAY,
                )),
            ),
        ]);
        check_err(vec![
            (bson!({"$year": "$s"}), 16006),
            (
                bson!({"$year": {"date": "$d", "timezone": "Mars/Base"}}),
                40485,
            ),
            (
                bson!({"$dateToString": {"date": "$d", "format": "%Q"}}),
                18536,
            ),
            (bson!({"$dateFromString": {"dateString": "garbage"}}), 241),
            (bson!({"$dateFromParts": {"month": 1}}), 40516),
        ]);
        // civil conversions round-trip over a wide range
        for days in (-800_000..800_000).step_by(997) {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
        // ISO week-year edge: 2021-01-01 is in week 53 of 2020
        let p = Parts::of(days_from_civil(2021, 1, 1) * MS_PER_DAY);
        assert_eq!(p.iso_week(), (2020, 53));
    }
}
