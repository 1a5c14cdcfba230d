//! Time-to-live values as CouchDB writes them for the automatic purge:
//! `{num}_{unit}` (`10_sec`, `3_hours`, `1_day`, `2_weeks`, `6_months`;
//! a unit is recognised by its first letters: `sec…`, `min…`, `hour…`,
//! `day…`, `week…`, `month…` (30 days)), or `infinity` (never).
//!
//! Invariant: [`parse_setting`] accepts exactly what a database's
//! `PUT /db/_auto_purge` may store (a positive number of a known unit, or
//! `infinity`); [`parse_default`] is the server setting's reading, which
//! also takes a leading `-` (a negative TTL: every deletion is due), as
//! CouchDB's plugin reads its configuration.

/// How long a deleted document is kept before it may be purged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ttl {
    /// Seconds (negative only from the server setting).
    Secs(i64),
    /// Never purged.
    Infinity,
}

const MINUTE: i64 = 60;
const HOUR: i64 = 60 * MINUTE;
const DAY: i64 = 24 * HOUR;
const WEEK: i64 = 7 * DAY;
const MONTH: i64 = 30 * DAY;

fn unit(s: &str) -> Option<i64> {
    [
        ("sec", 1),
        ("min", MINUTE),
        ("hour", HOUR),
        ("day", DAY),
        ("week", WEEK),
        ("month", MONTH),
    ]
    .iter()
    .find(|(prefix, _)| s.starts_with(prefix))
    .map(|&(_, secs)| secs)
}

/// A positive period, `{num}_{unit}`: the number is an integer (an
/// optional `+`), the unit follows the first `_`.
fn period(s: &str) -> Option<i64> {
    let (num, unit_text) = s.split_once('_')?;
    let unit = unit(unit_text)?;
    let digits = num.strip_prefix('+').unwrap_or(num);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: i64 = digits.parse().ok()?;
    if n <= 0 {
        return None;
    }
    n.checked_mul(unit)
}

/// A database's `deleted_document_ttl`; None when it is not one.
pub fn parse_setting(s: &str) -> Option<Ttl> {
    if s == "infinity" {
        return Some(Ttl::Infinity);
    }
    period(s).map(Ttl::Secs)
}

/// The server's `[couch_auto_purge_plugin] deleted_document_ttl`; None
/// when it is not one (the setting is then ignored).
pub fn parse_default(s: &str) -> Option<Ttl> {
    let s = s.trim();
    match s.strip_prefix('-') {
        Some(rest) => period(rest).map(|p| Ttl::Secs(-p)),
        None => parse_setting(s),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periods_as_couchdb_reads_them() {
        assert_eq!(parse_setting("1_sec"), Some(Ttl::Secs(1)));
        assert_eq!(parse_setting("3_seconds"), Some(Ttl::Secs(3)));
        assert_eq!(parse_setting("2_minutes"), Some(Ttl::Secs(120)));
        assert_eq!(parse_setting("1_hour"), Some(Ttl::Secs(3600)));
        assert_eq!(parse_setting("1_day"), Some(Ttl::Secs(86_400)));
        assert_eq!(parse_setting("1_week"), Some(Ttl::Secs(604_800)));
        assert_eq!(parse_setting("1_month"), Some(Ttl::Secs(2_592_000)));
        assert_eq!(parse_setting("+5_sec"), Some(Ttl::Secs(5)));
        assert_eq!(parse_setting("1_sec_and_more"), Some(Ttl::Secs(1)));
        assert_eq!(parse_setting("infinity"), Some(Ttl::Infinity));
    }

    #[test]
    fn refused() {
        for bad in [
            "",
            "1",
            "sec",
            "_sec",
            "0_sec",
            "-1_sec",
            "1_fortnight",
            "1.5_hour",
            "1 sec",
            "x_sec",
            "1_",
            "Infinity",
            "1_Sec",
            "99999999999999999999_sec",
        ] {
            assert_eq!(parse_setting(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_server_default_may_be_negative() {
        assert_eq!(parse_default("-1_hour"), Some(Ttl::Secs(-3600)));
        assert_eq!(parse_default(" 2_day "), Some(Ttl::Secs(172_800)));
        assert_eq!(parse_default("--1_hour"), None);
        assert_eq!(parse_default("infinity"), Some(Ttl::Infinity));
    }
}
