//! Hostile variants of valid input: byte flips, cuts, repeated and
//! inserted ranges, numbers swapped for out-of-range ones, deep nesting,
//! long strings, and the tokens that YAML and JSON treat specially.

use proptest::prelude::*;

/// Numbers that no field takes as they are, or only just.
const NUMBERS: &[&str] = &[
    "-1",
    "0",
    "1",
    "7",
    "+1",
    "-0",
    "4294967296",
    "18446744073709551615",
    "18446744073709551616",
    "-9223372036854775809",
    "99999999999999999999999999999999",
    "1e400",
    "1.5",
    "0x10",
    ".nan",
    "104857600",
];

/// Tokens with a meaning in YAML or JSON, and bytes no text should hold.
const TOKENS: &[&str] = &[
    "\"",
    "'",
    ":",
    ": ",
    ",",
    "{",
    "}",
    "[",
    "]",
    "\n",
    "\n- ",
    "- ",
    "&a ",
    "*a",
    "!!binary ",
    "!tag ",
    "? ",
    "---\n",
    "...\n",
    "#",
    "|",
    ">",
    "\t",
    "\0",
    "\u{feff}",
    "\\u0000",
    "\\",
    "null",
    "~",
    "<<: *a\n",
    "\u{2028}",
];

/// Bytes that make a near-miss of a number or a name.
const BYTES: &[u8] = &[b'+', b'-', b' ', b'.', b'/', b'0', b'9', 0, 0x80, 0xff];

/// One change to a byte string. Positions are taken modulo its length.
#[derive(Debug, Clone)]
pub enum Mutation {
    Flip { at: usize, mask: u8 },
    Set { at: usize, byte: u8 },
    Truncate { at: usize },
    Delete { at: usize, len: usize },
    Duplicate { from: usize, len: usize, to: usize },
    Insert { at: usize, bytes: Vec<u8> },
    Token { at: usize, token: &'static str },
    Number { nth: usize, with: &'static str },
    Nest { at: usize, open: u8, depth: usize },
    LongString { at: usize, len: usize },
}

/// Any one [`Mutation`].
pub fn mutation() -> impl Strategy<Value = Mutation> {
    let at = any::<usize>();
    prop_oneof![
        1 => (at, 1..=255u8).prop_map(|(at, mask)| Mutation::Flip { at, mask }),
        1 => (at, prop::sample::select(BYTES)).prop_map(|(at, byte)| Mutation::Set { at, byte }),
        1 => at.prop_map(|at| Mutation::Truncate { at }),
        1 => (at, 1..64usize).prop_map(|(at, len)| Mutation::Delete { at, len }),
        1 => (at, 1..256usize, at).prop_map(|(from, len, to)| Mutation::Duplicate { from, len, to }),
        1 => (at, prop::collection::vec(any::<u8>(), 1..16))
            .prop_map(|(at, bytes)| Mutation::Insert { at, bytes }),
        1 => (at, prop::sample::select(TOKENS)).prop_map(|(at, token)| Mutation::Token { at, token }),
        3 => (0..32usize, prop::sample::select(NUMBERS))
            .prop_map(|(nth, with)| Mutation::Number { nth, with }),
        1 => (at, prop::sample::select(&b"[{"[..]), prop_oneof![1..200usize, Just(10_000)])
            .prop_map(|(at, open, depth)| Mutation::Nest { at, open, depth }),
        1 => (at, prop_oneof![1..1000usize, Just(1 << 16)])
            .prop_map(|(at, len)| Mutation::LongString { at, len }),
    ]
}

/// The changes to make to a valid input: up to eight mutations of any
/// kind, up to four numbers swapped for hostile ones, or one byte, often
/// the first, made a near miss (a sign, a space, a separator, another
/// digit, no UTF-8).
pub fn changes() -> impl Strategy<Value = Vec<Mutation>> {
    let near_miss = (
        prop_oneof![Just(0), any::<usize>()],
        prop::sample::select(BYTES),
    )
        .prop_map(|(at, byte)| vec![Mutation::Set { at, byte }]);
    prop_oneof![
        prop::collection::vec(mutation(), 1..8),
        numbers(),
        near_miss,
    ]
}

/// Up to four numbers swapped for hostile ones.
pub fn numbers() -> impl Strategy<Value = Vec<Mutation>> {
    let number = (0..32usize, prop::sample::select(NUMBERS))
        .prop_map(|(nth, with)| Mutation::Number { nth, with });
    prop::collection::vec(number, 1..4)
}

/// One of `seeds`, by index, after [`changes`]. (A plain map of both, so
/// that a failure shrinks to the fewest changes of the first seed.)
pub fn mutated(seeds: Vec<Vec<u8>>) -> impl Strategy<Value = (usize, Vec<u8>)> {
    (0..seeds.len(), changes()).prop_map(move |(i, ms)| (i, apply_all(seeds[i].clone(), &ms)))
}

pub fn apply_all(valid: Vec<u8>, changes: &[Mutation]) -> Vec<u8> {
    changes.iter().fold(valid, apply)
}

/// Fully random bytes.
pub fn random_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..4096)
}

/// Random text: any characters, and a bias to the ones YAML and JSON use.
pub fn random_text() -> impl Strategy<Value = String> {
    let ch = prop_oneof![
        any::<char>(),
        prop::sample::select(&[':', ' ', '\n', '-', '{', '}', '[', ']', '"', ',', 'a', '1'][..]),
    ];
    prop::collection::vec(ch, 0..512).prop_map(|cs| cs.into_iter().collect())
}

pub fn apply(mut b: Vec<u8>, m: &Mutation) -> Vec<u8> {
    let pos = |at: usize, len: usize| at % (len + 1);
    match *m {
        Mutation::Flip { at, mask } if !b.is_empty() => {
            let i = at % b.len();
            b[i] ^= mask;
        }
        Mutation::Set { at, byte } if !b.is_empty() => {
            let i = at % b.len();
            b[i] = byte;
        }
        Mutation::Flip { .. } | Mutation::Set { .. } => {}
        Mutation::Truncate { at } => b.truncate(pos(at, b.len())),
        Mutation::Delete { at, len } => {
            let i = pos(at, b.len());
            b.drain(i..(i + len).min(b.len()));
        }
        Mutation::Duplicate { from, len, to } => {
            let i = pos(from, b.len());
            let part = b[i..(i + len).min(b.len())].to_vec();
            let j = pos(to, b.len());
            b.splice(j..j, part);
        }
        Mutation::Insert { at, ref bytes } => {
            let i = pos(at, b.len());
            b.splice(i..i, bytes.iter().copied());
        }
        Mutation::Token { at, token } => {
            let i = pos(at, b.len());
            b.splice(i..i, token.bytes());
        }
        Mutation::Number { nth, with } => {
            let runs = digit_runs(&b);
            if let Some(&(s, e)) = runs.get(nth % runs.len().max(1)) {
                b.splice(s..e, with.bytes());
            }
        }
        Mutation::Nest { at, open, depth } => {
            let i = pos(at, b.len());
            b.splice(i..i, std::iter::repeat_n(open, depth));
        }
        Mutation::LongString { at, len } => {
            let i = pos(at, b.len());
            let s = format!("\"{}\"", "x".repeat(len));
            b.splice(i..i, s.into_bytes());
        }
    }
    b
}

/// The `[start, end)` of every run of ASCII digits.
fn digit_runs(b: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_digit() {
            let s = i;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            out.push((s, i));
        } else {
            i += 1;
        }
    }
    out
}
