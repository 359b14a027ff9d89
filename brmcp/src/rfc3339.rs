//! Unix seconds as RFC 3339 UTC times: what the listing commands print and what MCP
//! tasks carry (`createdAt`, `lastUpdatedAt`), with no date crate.

/// Seconds in a day: unix time has no leap seconds.
const SECS_PER_DAY: i64 = 86_400;

/// Unix seconds as an RFC 3339 UTC time, `1970-01-01T00:00:00Z` style.
///
/// Years outside 0000..=9999 (no ledger holds them) print with more digits or a sign.
pub(crate) fn rfc3339(secs: i64) -> String {
    let days = secs.div_euclid(SECS_PER_DAY);
    let of_day = secs.rem_euclid(SECS_PER_DAY);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        of_day / 3600,
        of_day % 3600 / 60,
        of_day % 60
    )
}

/// The proleptic Gregorian date of a count of days since 1970-01-01 (H. Hinnant's
/// `civil_from_days`: 400-year eras of 146,097 days, years starting in March so the
/// leap day ends them).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097); // [0, 146096]
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365; // [0, 399]
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // [0, 365]
    let mp = (5 * doy + 2) / 153; // [0, 11], March first
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    // Both are in range by construction: month 1..=12, day 1..=31.
    (
        year,
        u32::try_from(month).unwrap_or(0),
        u32::try_from(day).unwrap_or(0),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_of_known_times() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1), "1970-01-01T00:00:01Z");
        assert_eq!(rfc3339(-1), "1969-12-31T23:59:59Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_234_567_890), "2009-02-13T23:31:30Z");
        assert_eq!(rfc3339(1_700_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(rfc3339(2_147_483_647), "2038-01-19T03:14:07Z");
        assert_eq!(rfc3339(253_402_300_799), "9999-12-31T23:59:59Z");
    }

    #[test]
    fn rfc3339_across_leap_days() {
        // 2024 is a leap year: Feb 28, Feb 29, Mar 1.
        assert_eq!(rfc3339(1_709_164_799), "2024-02-28T23:59:59Z");
        assert_eq!(rfc3339(1_709_164_800), "2024-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_709_251_200), "2024-03-01T00:00:00Z");
        // 2100 is not (divisible by 100, not 400): Feb 28 is followed by Mar 1.
        assert_eq!(rfc3339(4_107_542_399), "2100-02-28T23:59:59Z");
        assert_eq!(rfc3339(4_107_542_400), "2100-03-01T00:00:00Z");
        // 2023 is not: Dec 31 is its 365th day.
        assert_eq!(rfc3339(1_703_980_800), "2023-12-31T00:00:00Z");
        // 2024 is: Dec 31 is its 366th day.
        assert_eq!(rfc3339(1_735_603_200), "2024-12-31T00:00:00Z");
    }

    #[test]
    fn every_day_follows_the_one_before() {
        // Walks 1900..2101 day by day against a calendar counted independently.
        let leap = |y: i64| (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
        // 1900-01-01: 70 years before the epoch, 17 of them leap years.
        let mut days = -(70 * 365 + 17);
        for year in 1900..2101 {
            for month in 1..=12u32 {
                let len = match month {
                    2 if leap(year) => 29,
                    2 => 28,
                    4 | 6 | 9 | 11 => 30,
                    _ => 31,
                };
                for day in 1..=len {
                    assert_eq!(civil_from_days(days), (year, month, day));
                    days += 1;
                }
            }
        }
    }
}
