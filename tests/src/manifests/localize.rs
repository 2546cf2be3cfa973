//! Substitution: [`localize_paths`] turns mount paths into local
//! directories and [`localize_addrs`] turns `host:port` addresses into
//! local ones, each in one pass over a string (an argument, a variable or
//! a mounted ConfigMap file).

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

/// Replaces mount paths, in one pass, where they start a path: at the
/// start, after whitespace, `=`, a quote, `,` or `file://`, and followed by
/// `/`, the end, whitespace or a quote. At one position the longest mount
/// path wins; a replacement is never rewritten again.
pub fn localize_paths(s: &str, mounts: &[(String, PathBuf)]) -> String {
    let mut sorted: Vec<&(String, PathBuf)> = mounts.iter().collect();
    sorted.sort_by_key(|(p, _)| std::cmp::Reverse(p.len()));
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    'scan: while i < s.len() {
        let before_ok = i == 0
            || s[..i].ends_with("file://")
            || s[..i]
                .chars()
                .last()
                .is_some_and(|c| c.is_whitespace() || matches!(c, '=' | '"' | '\'' | ','));
        if before_ok {
            for (mount, dir) in &sorted {
                if !s[i..].starts_with(mount.as_str()) {
                    continue;
                }
                let end = i + mount.len();
                let after_ok = end == s.len()
                    || s[end..]
                        .chars()
                        .next()
                        .is_some_and(|c| c == '/' || c.is_whitespace() || matches!(c, '"' | '\''));
                if after_ok {
                    out.push_str(dir.to_str().expect("utf-8 temp path"));
                    i = end;
                    continue 'scan;
                }
            }
        }
        let c = s[i..].chars().next().expect("a char");
        out.push(c);
        i += c.len_utf8();
    }
    out
}

fn is_host_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '.' || c == '-'
}

/// Replaces every `host:port` in `s`: a local listen address
/// (`0.0.0.0`, `127.0.0.1`, `localhost`) on one of `own` ports becomes
/// `127.0.0.1:<local port>`; a name in `routes` becomes its local
/// address(es). Any other `host:port` is an error.
pub fn localize_addrs(
    s: &str,
    own: &BTreeMap<u16, u16>,
    routes: &HashMap<(String, u16), String>,
) -> Result<String, String> {
    let chars: Vec<(usize, char)> = s.char_indices().collect();
    let mut out = String::with_capacity(s.len());
    let mut copied = 0;
    let mut k = 0;
    while k < chars.len() {
        let (start, c) = chars[k];
        let starts_token = is_host_char(c) && (k == 0 || !is_host_char(chars[k - 1].1));
        if !starts_token {
            k += 1;
            continue;
        }
        let mut j = k;
        while j < chars.len() && is_host_char(chars[j].1) {
            j += 1;
        }
        let host_end = chars.get(j).map_or(s.len(), |x| x.0);
        let host = &s[start..host_end];
        let colon = chars.get(j).is_some_and(|x| x.1 == ':');
        let mut d = j + 1;
        while colon && d < chars.len() && chars[d].1.is_ascii_digit() {
            d += 1;
        }
        let port_end = chars.get(d).map_or(s.len(), |x| x.0);
        let digits = colon && d > j + 1;
        // `host:port` not followed by more of a name.
        let whole = digits && chars.get(d).is_none_or(|x| !is_host_char(x.1));
        let numeric_host = host.chars().all(|c| c.is_ascii_digit());
        if !whole || numeric_host {
            k = j.max(k + 1);
            continue;
        }
        let port: u16 = s[host_end + 1..port_end]
            .parse()
            .map_err(|_| format!("bad port in {}", &s[start..port_end]))?;
        let replacement = if matches!(host, "0.0.0.0" | "127.0.0.1" | "localhost") {
            own.get(&port)
                .map(|local| format!("127.0.0.1:{local}"))
                .ok_or_else(|| format!("{host}:{port} is not a port this container declares"))?
        } else {
            routes
                .get(&(host.to_string(), port))
                .cloned()
                .ok_or_else(|| {
                    format!("{host}:{port} is no Service or pod name of the planned pods")
                })?
        };
        if replacement.is_empty() {
            return Err(format!("{host}:{port} selects no planned pod"));
        }
        out.push_str(&s[copied..start]);
        out.push_str(&replacement);
        copied = port_end;
        k = d;
    }
    out.push_str(&s[copied..]);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_map_or_fail() {
        let own: BTreeMap<u16, u16> = [(7070, 20001)].into_iter().collect();
        let routes: HashMap<(String, u16), String> = [(
            ("etcd-0.etcd".to_string(), 2379),
            "127.0.0.1:30000".to_string(),
        )]
        .into_iter()
        .collect();
        assert_eq!(
            localize_addrs("http://etcd-0.etcd:2379,x=0.0.0.0:7070", &own, &routes).unwrap(),
            "http://127.0.0.1:30000,x=127.0.0.1:20001"
        );
        assert_eq!(
            localize_addrs("at 12:30, etcd-0=http", &own, &routes).unwrap(),
            "at 12:30, etcd-0=http"
        );
        assert!(localize_addrs("sluice-driver:7070", &own, &routes).is_err());
        assert!(localize_addrs("0.0.0.0:9999", &own, &routes).is_err());
    }

    #[test]
    fn paths_map_at_path_boundaries() {
        let mounts = vec![("/data".to_string(), PathBuf::from("/tmp/x/pvc"))];
        assert_eq!(
            localize_paths("/data/checkpoints", &mounts),
            "/tmp/x/pvc/checkpoints"
        );
        assert_eq!(
            localize_paths("path: /data/sinks/a\nfile:///data", &mounts),
            "path: /tmp/x/pvc/sinks/a\nfile:///tmp/x/pvc"
        );
        assert_eq!(
            localize_paths("/database /x/data", &mounts),
            "/database /x/data"
        );
        // A replacement under /tmp is not rewritten by a /tmp mount.
        let nested = vec![
            ("/tmp".to_string(), PathBuf::from("/tmp/x/pod/tmp")),
            ("/data".to_string(), PathBuf::from("/tmp/x/pvc")),
        ];
        assert_eq!(
            localize_paths("/data/c /tmp", &nested),
            "/tmp/x/pvc/c /tmp/x/pod/tmp"
        );
    }
}
