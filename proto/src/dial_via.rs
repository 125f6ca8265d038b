//! `dial_via`: where to connect to a member the catalog names by another address, as
//! `host:port=addr:port,...`. The catalog names every member once for the whole cluster;
//! a process behind address translation, or a test that routes each site's traffic
//! through a proxy of its own (so that it can cut a site off), reaches the same member
//! at another address.

use std::collections::HashMap;

/// The parsed setting: a member's name → where this process dials it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DialVia(HashMap<String, String>);

impl DialVia {
    /// Parses `host:port=addr:port,...` (empty: no translation).
    pub fn parse(setting: &str) -> Result<DialVia, String> {
        let mut map = HashMap::new();
        for pair in setting.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (host, addr) = pair
                .split_once('=')
                .map(|(h, a)| (h.trim(), a.trim()))
                .filter(|(h, a)| !h.is_empty() && !a.is_empty())
                .ok_or_else(|| format!("dial_via: '{pair}' is not host:port=addr:port"))?;
            if map.insert(host.to_string(), addr.to_string()).is_some() {
                return Err(format!("dial_via: {host} is named twice"));
            }
        }
        Ok(DialVia(map))
    }

    /// Where to connect to `host`: its translation, or `host` itself.
    pub fn addr<'a>(&'a self, host: &'a str) -> &'a str {
        self.0.get(host).map_or(host, String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn translates_the_named_hosts_and_leaves_the_others() {
        let d = DialVia::parse(" a:1=127.0.0.1:9, b:2 = c:3 ,").unwrap();
        assert_eq!(d.addr("a:1"), "127.0.0.1:9");
        assert_eq!(d.addr("b:2"), "c:3");
        assert_eq!(d.addr("z:4"), "z:4");
        assert_eq!(DialVia::parse("").unwrap(), DialVia::default());
    }

    #[test]
    fn refuses_malformed_and_repeated_pairs() {
        for bad in ["a:1", "=b:2", "a:1=", "a:1=b:2,a:1=c:3"] {
            assert!(DialVia::parse(bad).is_err(), "{bad}");
        }
    }
}
