//! `allowed_ips`: the addresses and CIDR ranges remote agents may come from.
//!
//! Entries must be written canonically, as this code writes them back: an address
//! as Rust prints it (`10.0.0.7`, `2001:db8::1`, lowercase, shortest IPv6 form), a
//! range as its network address with no host bits set and a prefix shorter than the
//! address (`10.0.0.0/8`, `2001:db8::/32`; a full-length prefix is the bare address).
//! A non-canonical entry is refused with the canonical form to write, never rewritten
//! silently: the file says exactly what is allowed.

use std::net::IpAddr;

/// One entry of `allowed_ips`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpRange {
    net: IpAddr,
    prefix: u8,
}

impl IpRange {
    /// Parses `text`; `Err` carries why, with the canonical form when that is all.
    ///
    /// # Errors
    /// A text that is not an address or range, or not written canonically.
    pub fn parse(text: &str) -> Result<Self, String> {
        let (addr, prefix) = match text.split_once('/') {
            Some((addr, prefix)) => (addr, Some(prefix)),
            None => (text, None),
        };
        let ip: IpAddr = addr
            .parse()
            .map_err(|_| format!("{text:?} is not an IP address or CIDR range"))?;
        let max = max_prefix(ip);
        let prefix = match prefix {
            None => max,
            Some(p) => p
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= max)
                .ok_or_else(|| format!("{text:?}: the prefix is not 0 to {max}"))?,
        };
        let range = Self {
            net: mask(ip, prefix),
            prefix,
        };
        let canonical = range.to_string();
        if canonical != text {
            return Err(format!("{text:?} is not canonical (write {canonical:?})"));
        }
        Ok(range)
    }

    /// Whether `ip` is inside; an IPv4-mapped IPv6 address counts as its IPv4 one.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        max_prefix(ip) == max_prefix(self.net) && mask(ip, self.prefix) == self.net
    }
}

impl std::fmt::Display for IpRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.prefix == max_prefix(self.net) {
            write!(f, "{}", self.net)
        } else {
            write!(f, "{}/{}", self.net, self.prefix)
        }
    }
}

fn max_prefix(ip: IpAddr) -> u8 {
    match ip {
        IpAddr::V4(_) => 32,
        IpAddr::V6(_) => 128,
    }
}

/// `ip` with all but its first `prefix` bits cleared.
fn mask(ip: IpAddr, prefix: u8) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => {
            let bits = u32::from(v4);
            let kept = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            IpAddr::V4((bits & kept).into())
        }
        IpAddr::V6(v6) => {
            let bits = u128::from(v6);
            let kept = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            IpAddr::V6((bits & kept).into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn ranges_hold_their_addresses_only() {
        let v4 = IpRange::parse("10.1.0.0/16").unwrap();
        assert!(v4.contains(ip("10.1.255.7")));
        assert!(v4.contains(ip("::ffff:10.1.0.1")), "mapped");
        assert!(!v4.contains(ip("10.2.0.1")));
        assert!(!v4.contains(ip("::a01:1")));
        let v6 = IpRange::parse("2001:db8::/32").unwrap();
        assert!(v6.contains(ip("2001:db8:ffff::1")));
        assert!(!v6.contains(ip("2001:db9::1")));
        assert!(!v6.contains(ip("10.1.0.1")));
        let one = IpRange::parse("192.0.2.7").unwrap();
        assert!(one.contains(ip("192.0.2.7")) && !one.contains(ip("192.0.2.8")));
        let all = IpRange::parse("0.0.0.0/0").unwrap();
        assert!(all.contains(ip("203.0.113.9")) && !all.contains(ip("2001:db8::1")));
    }

    #[test]
    fn only_the_canonical_form_is_accepted() {
        for (text, why) in [
            ("10.1.2.3/16", "write \"10.1.0.0/16\""),
            ("10.0.0.1/32", "write \"10.0.0.1\""),
            ("2001:DB8::/32", "write \"2001:db8::/32\""),
            ("2001:db8:0::1", "write \"2001:db8::1\""),
            ("10.0.0.0/33", "prefix is not 0 to 32"),
            ("10.0.0.0/-1", "prefix"),
            ("example.com", "not an IP address"),
            (" 10.0.0.1", "not an IP address"),
        ] {
            let err = IpRange::parse(text).unwrap_err();
            assert!(err.contains(why), "{text}: {err}");
        }
    }
}
