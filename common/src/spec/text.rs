//! A spec's text, JSON or YAML, into a value. An error names the field at
//! fault (`source.rate.partitions`, or `(root)` for the text as a whole)
//! and where in the text it is, as a line and column, also where the YAML
//! parser leaves that out (at the very start of the text) or gives only a
//! byte offset (a character YAML does not allow).

use serde::de::DeserializeOwned;

use crate::error::{Error, Result};

/// The field of an error about the text as a whole.
const ROOT: &str = "(root)";

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
        Error::invalid(field, located(&e.into_inner()))
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
}
