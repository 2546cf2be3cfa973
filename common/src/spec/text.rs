//! A spec's text, JSON or YAML, into a value. An error names the field at
//! fault (`source.rate.partitions`, or `(root)` for the text as a whole)
//! and where in the text it is, as a line and column, also where the YAML
//! parser leaves that out (at the very start of the text) or gives only a
//! byte offset (a character YAML does not allow), and a key longer than
//! YAML allows by its first characters.

use serde::de::DeserializeOwned;

use super::tables::MAX_TABLE_NAME;
use crate::error::{Error, Result};

/// The field of an error about the text as a whole.
const ROOT: &str = "(root)";

/// The longest key YAML reads (an implicit key: YAML 1.2, section 7.4).
const MAX_KEY_CHARS: usize = 1024;

/// The deepest nesting of YAML's bracketed collections that a spec may
/// have. A spec needs a few levels; the YAML parser's work per token grows
/// with the depth, so a deeper one costs time for no purpose.
const MAX_NESTING: usize = 64;

/// Deserializes `text`: JSON when it starts with `{`, YAML otherwise.
pub fn deserialize<T: DeserializeOwned>(text: &str) -> Result<T> {
    if text.trim_start().starts_with('{') {
        let mut de = serde_json::Deserializer::from_str(text);
        let value = serde_path_to_error::deserialize(&mut de)
            .map_err(|e| Error::invalid(field_of(e.path()), e.into_inner().to_string()))?;
        // Anything after the object is not part of it: refused, not ignored.
        de.end().map_err(|e| Error::invalid(ROOT, e.to_string()))?;
        return Ok(value);
    }
    printable(text)?;
    shallow(text)?;
    let de = serde_yaml_ng::Deserializer::from_str(text);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let field = field_of(e.path());
        match long_key(text) {
            Some(long) => Error::invalid(field, long),
            None => Error::invalid(field, located(&e.into_inner())),
        }
    })
}

/// The path of the field at fault; the text as a whole when there is
/// none, or when it is a key of the root without a name (`"": 1`).
fn field_of(path: &serde_path_to_error::Path) -> String {
    let s = path.to_string();
    if s == "." || s.is_empty() {
        ROOT.to_string()
    } else {
        s
    }
}

/// The YAML parser's message, with the line and column that it leaves out
/// of an error at the start of the text.
fn located(e: &serde_yaml_ng::Error) -> String {
    let message = e.to_string();
    match e.location() {
        Some(at) if !message.contains(" at line ") => {
            format!("{message} at line {} column {}", at.line(), at.column())
        }
        _ => message,
    }
}

/// The refusal of a key longer than YAML's [`MAX_KEY_CHARS`], if `text`
/// has one: the parser's own message ("could not find expected ':'") does
/// not say that the key is the trouble. Looked for only once the text is
/// refused, in block mappings (`key: value`, also in a sequence's entry)
/// and flow mappings (`{key: value, ...}`), plain or quoted.
fn long_key(text: &str) -> Option<String> {
    for (n, line) in text.split('\n').enumerate() {
        let Some((column, key)) = keys_of(line).find(|(_, k)| k.chars().count() > MAX_KEY_CHARS)
        else {
            continue;
        };
        let start: String = key.chars().take(32).collect();
        return Some(format!(
            "the key {start:?}... at line {} column {} is {} characters; YAML allows a \
             key at most {MAX_KEY_CHARS}, and a table name (under `sources:` or `tables:`) \
             is at most {MAX_TABLE_NAME} characters ([a-z_][a-z0-9_]*)",
            n + 1,
            column + 1,
            key.chars().count()
        ));
    }
    None
}

/// The keys of mapping entries on `line`, each with its column, without
/// quotes: before each `: ` (or a `:` ending the line), after any
/// indentation and `- ` at the start of the line (a block mapping's key),
/// or after a `{` or `,` (a flow mapping's).
fn keys_of(line: &str) -> impl Iterator<Item = (usize, &str)> {
    let colons = line
        .match_indices(':')
        .map(|(i, _)| i)
        .filter(|&i| matches!(line[i + 1..].chars().next(), None | Some(' ' | '\t' | '\r')));
    colons.enumerate().filter_map(|(nth, colon)| {
        let before = &line[..colon];
        let start = match before.rfind(['{', ',']) {
            Some(i) => i + 1,
            None if nth == 0 => 0,
            None => return None,
        };
        let (column, key) = key_at(&before[start..]);
        Some((line[..start].chars().count() + column, key))
    })
}

/// The key in `segment` (the text before its colon), and its column in it.
fn key_at(segment: &str) -> (usize, &str) {
    let mut key = segment;
    let mut column = 0;
    loop {
        let trimmed = key.trim_start();
        column += key.chars().count() - trimmed.chars().count();
        key = trimmed;
        match key.strip_prefix("- ") {
            Some(rest) => {
                column += 2;
                key = rest;
            }
            None => break,
        }
    }
    let key = key.trim_end();
    let unquoted = key
        .strip_prefix('"')
        .and_then(|k| k.strip_suffix('"'))
        .or_else(|| key.strip_prefix('\'').and_then(|k| k.strip_suffix('\'')));
    (column, unquoted.unwrap_or(key))
}

/// Refuses a character that YAML does not allow in a document (a control
/// character other than tab and line breaks, or a non-character), naming
/// it and its line and column.
fn printable(text: &str) -> Result<()> {
    for (n, line) in text.split('\n').enumerate() {
        if let Some((col, c)) = line.chars().enumerate().find(|&(_, c)| !is_printable(c)) {
            return Err(Error::invalid(
                ROOT,
                format!(
                    "character U+{:04X} is not allowed in YAML at line {} column {}",
                    u32::from(c),
                    n + 1,
                    col + 1
                ),
            ));
        }
    }
    Ok(())
}

/// Refuses text whose `[` and `{` nest deeper than [`MAX_NESTING`]. The
/// brackets are counted wherever they are, quoted or not, so that no
/// quoting can hide them from this check; a spec never has that many
/// open at once in a string.
fn shallow(text: &str) -> Result<()> {
    let mut depth = 0usize;
    for (n, line) in text.split('\n').enumerate() {
        for (col, c) in line.chars().enumerate() {
            match c {
                '[' | '{' => depth += 1,
                ']' | '}' => depth = depth.saturating_sub(1),
                _ => continue,
            }
            if depth > MAX_NESTING {
                return Err(Error::invalid(
                    ROOT,
                    format!(
                        "nested deeper than {MAX_NESTING} levels at line {} column {} \
                         (in YAML, brackets count inside strings too; JSON has no \
                         such limit on strings)",
                        n + 1,
                        col + 1
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// YAML's printable characters (YAML 1.1, section 5.1).
fn is_printable(c: char) -> bool {
    matches!(c,
        '\t' | '\n' | '\r' | ' '..='~' | '\u{85}'
        | '\u{a0}'..='\u{d7ff}' | '\u{e000}'..='\u{fffd}' | '\u{10000}'..)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(text: &str) -> String {
        match deserialize::<std::collections::BTreeMap<String, u32>>(text) {
            Err(Error::InvalidSpec { reason, .. }) => reason,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn every_error_says_where() {
        assert!(
            reason("a").ends_with("at line 1 column 1"),
            "{}",
            reason("a")
        );
        assert_eq!(
            reason("\0a: 1"),
            "character U+0000 is not allowed in YAML at line 1 column 1"
        );
        assert!(reason("a: 1\nb: x\u{7f}").contains("U+007F"));
        assert!(reason("a: 1\nb: x\u{7f}").ends_with("line 2 column 5"));
        assert!(reason("{\"a\": 1} {\"a\": 2}").starts_with("trailing characters at line 1"));
        let deep = format!("a: {}", "[".repeat(100));
        assert!(
            reason(&deep).starts_with("nested deeper than 64 levels at line 1 column 68 "),
            "{}",
            reason(&deep)
        );
        assert!(
            deserialize::<serde_json::Value>(&format!("a: [{}[]]", "[], ".repeat(100))).is_ok()
        );
        let unnamed = deserialize::<crate::spec::RateSpec>("\"\": 1");
        assert!(
            matches!(&unnamed, Err(Error::InvalidSpec { field, .. }) if field == ROOT),
            "{unnamed:?}"
        );
    }

    #[test]
    fn a_key_longer_than_yaml_allows_is_named_by_its_start() {
        let long = "a".repeat(1100);
        let spec = format!(
            "name: q\nsources:\n  {long}: {{rate: {{partitions: 1, rows_per_second: 1}}}}\n\
             sink: {{discard: {{}}}}\nsql: SELECT 1\n"
        );
        let e = crate::spec::QuerySpec::parse(&spec).unwrap_err();
        let Error::InvalidSpec { field, reason } = &e else {
            panic!("not a spec error: {e}");
        };
        assert_eq!(field, "sources", "{e}");
        let start = "a".repeat(32);
        assert_eq!(
            reason,
            &format!(
                "the key \"{start}\"... at line 3 column 3 is 1100 characters; YAML allows a key \
                 at most 1024, and a table name (under `sources:` or `tables:`) is at most 63 \
                 characters ([a-z_][a-z0-9_]*)"
            )
        );
        // Quoted, in a flow mapping, in a sequence: found alike.
        for text in [
            format!("a: 1\n\"{long}\": 2\n"),
            format!("a: {{b: 1, {long}: 2}}\n"),
            format!("- {long}: 1\n"),
        ] {
            let reason = match deserialize::<serde_json::Value>(&text) {
                Err(Error::InvalidSpec { reason, .. }) => reason,
                other => panic!("expected a refusal, got {other:?}"),
            };
            assert!(reason.contains("is 1100 characters"), "{reason}");
        }
        // A key of 1024 characters is YAML's too; the table name is refused.
        let spec = spec.replace(&long, &"a".repeat(1024));
        let e = crate::spec::QuerySpec::parse(&spec)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("a table name must match [a-z_][a-z0-9_]{0,62}")
                && e.contains("(1024 characters)"),
            "{e}"
        );
    }

    #[test]
    fn the_keys_of_a_line_are_before_a_colon_and_a_space() {
        fn keys(line: &str) -> Vec<(usize, &str)> {
            keys_of(line).collect()
        }
        assert_eq!(keys("  abc: 1"), [(2, "abc")]);
        assert_eq!(keys("- x: {y: 1, 'z': 2}"), [(2, "x"), (6, "y"), (12, "z")]);
        assert_eq!(keys("  \"q q\":"), [(2, "q q")]);
        assert_eq!(keys("url: http://x"), [(0, "url")]);
        assert_eq!(keys("sql: \"SELECT a: b\""), [(0, "sql")]);
        assert!(keys("no colon here").is_empty());
        assert!(keys("http://x").is_empty());
    }
}
