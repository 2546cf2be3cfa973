//! The shape of the source tree, checked on every test run:
//!
//! - no import cycles between the files of a crate;
//! - the benchmarks (`bench/`, `sluice-bench`) stay out of the product:
//!   no crate of the `sluice` binary depends on them or names them;
//! - each external system has one owner: only `driver/src/leader/` names
//!   `etcd_client`, only `common/src/storage/` names `object_store`, only
//!   `kafka/` (`sluice-kafka`) names `krafka` and `kafka_protocol` (and,
//!   in the product, the TLS and SASL crates only its client uses), and
//!   only `sql/` (and the tests' oracle, `tests/src/oracle.rs`) names
//!   `datafusion`.
//!
//! Imports are read from the text: `use` trees and `crate::`/`super::`
//! paths in code. A reference resolves to the deepest file whose module
//! path is a prefix of it. A re-export (`pub use child::X`) is a module's
//! facade, not a dependency, so it is not counted.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const CRATES: &[&str] = &[
    "common",
    "kafka",
    "driver",
    "executor",
    "sql",
    "plan",
    "cli",
    "nexmark-queries",
    "bench",
    "proto",
    "tests",
];

/// The crates of the `sluice` binary: none of them depends on `bench/`
/// or on the Nexmark queries.
const PRODUCT: &[&str] = &[
    "common", "kafka", "driver", "executor", "sql", "plan", "cli", "proto",
];

/// The benchmarks' crates, as a manifest names them.
const BENCH_CRATES: &[&str] = &["sluice-bench", "sluice-nexmark-queries"];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// `src/a/b.rs` and `src/a/b/mod.rs` are module `a::b`; `lib.rs`/`main.rs` are the root.
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = rel.iter().map(|s| s.to_string_lossy().into()).collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// Expands `a::{b, c::{d, e}}` into `a::b`, `a::c::d`, `a::c::e`.
fn expand(tree: &str) -> Vec<String> {
    let tree: String = tree.chars().filter(|c| !c.is_whitespace()).collect();
    let Some(open) = tree.find('{') else {
        return vec![tree];
    };
    let prefix = &tree[..open];
    let inner = &tree[open + 1..tree.rfind('}').unwrap()];
    let (mut depth, mut start, mut out) = (0, 0, Vec::new());
    for (i, c) in inner.char_indices().chain([(inner.len(), ',')]) {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                let item = &inner[start..i];
                if !item.is_empty() {
                    out.extend(expand(item).into_iter().map(|s| format!("{prefix}{s}")));
                }
                start = i + 1;
            }
            _ => {}
        }
    }
    out
}

/// Every `crate::`/`super::`/`self::` path in `text`, with whether it sits
/// inside an inline `mod name {` block (where `super` is the file itself).
fn references(text: &str) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    let mut inline = false;
    let mut stmt: Option<String> = None;
    for line in text.lines() {
        inline |= is_inline_mod(line);
        // `pub use child::X` in a parent is its facade, not a dependency.
        let t = line.trim_start();
        if stmt.is_none()
            && let Some(tree) = t.strip_prefix("use ")
        {
            stmt = Some(String::new());
            stmt.as_mut().unwrap().push_str(tree);
        } else if let Some(s) = stmt.as_mut() {
            s.push_str(line);
        }
        if let Some(s) = stmt.take_if(|s| s.contains(';')) {
            let tree = s.split(';').next().unwrap_or_default();
            out.extend(expand(tree).into_iter().map(|p| (p, inline)));
        }
    }
    // Inline paths such as `crate::query::retry::backoff(..)`.
    let mut inline = false;
    for line in text.lines() {
        inline |= is_inline_mod(line);
        if line.trim_start().starts_with("use ") || line.trim_start().starts_with("//") {
            continue;
        }
        for root in ["crate::", "super::"] {
            let mut from = 0;
            while let Some(i) = line[from..].find(root) {
                let at = from + i;
                let ok_before = at == 0
                    || !line[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == ':');
                let path: String = line[at..]
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                    .collect();
                if ok_before {
                    out.push((path.trim_end_matches(':').to_string(), inline));
                }
                from = at + root.len();
            }
        }
    }
    out
}

fn is_inline_mod(line: &str) -> bool {
    let t = line.trim_start();
    (t.starts_with("mod ") || t.starts_with("pub mod ")) && t.trim_end().ends_with('{')
}

/// The file module that `path` (as written in `module`) refers to, if any.
fn resolve(
    module: &[String],
    path: &str,
    inline: bool,
    files: &BTreeSet<Vec<String>>,
) -> Option<Vec<String>> {
    let mut segs: Vec<&str> = path.split("::").collect();
    let mut base: Vec<String> = match segs.first()? {
        &"crate" => {
            segs.remove(0);
            Vec::new()
        }
        &"super" | &"self" => {
            let mut b = module.to_vec();
            let mut first = true;
            while let Some(&s) = segs.first() {
                match s {
                    "self" => {}
                    "super" if first && inline => {}
                    "super" => {
                        b.pop()?;
                    }
                    _ => break,
                }
                first = false;
                segs.remove(0);
            }
            b
        }
        // A child module named without `self::` (`use batch::Timings;`).
        first => {
            let mut b = module.to_vec();
            b.push(first.to_string());
            if !files.contains(&b) {
                return None;
            }
            segs.remove(0);
            b
        }
    };
    let mut best = None;
    if files.contains(&base) {
        best = Some(base.clone());
    }
    for s in segs {
        base.push(s.to_string());
        if files.contains(&base) {
            best = Some(base.clone());
        }
    }
    best
}

fn find_cycle(graph: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Option<Vec<String>> {
    fn visit(
        n: &Vec<String>,
        g: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        state: &mut BTreeMap<Vec<String>, u8>,
        stack: &mut Vec<Vec<String>>,
    ) -> Option<Vec<String>> {
        state.insert(n.clone(), 1);
        stack.push(n.clone());
        for m in g.get(n).into_iter().flatten() {
            match state.get(m).copied().unwrap_or(0) {
                1 => {
                    let from = stack.iter().position(|s| s == m).unwrap();
                    let mut c: Vec<String> = stack[from..].iter().map(|s| s.join("::")).collect();
                    c.push(m.join("::"));
                    return Some(c);
                }
                0 => {
                    if let Some(c) = visit(m, g, state, stack) {
                        return Some(c);
                    }
                }
                _ => {}
            }
        }
        stack.pop();
        state.insert(n.clone(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for n in graph.keys() {
        if state.get(n).copied().unwrap_or(0) == 0
            && let Some(c) = visit(n, graph, &mut state, &mut Vec::new())
        {
            return Some(c);
        }
    }
    None
}

#[test]
fn no_import_cycles_between_files() {
    let mut cycles = Vec::new();
    for krate in CRATES {
        {
            let src = "src";
            let dir = workspace().join(krate).join(src);
            let mut list = Vec::new();
            rust_files(&dir, &mut list);
            if list.is_empty() {
                continue;
            }
            let files: BTreeSet<Vec<String>> = list.iter().map(|f| module_of(&dir, f)).collect();
            let mut graph: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
            for f in &list {
                let module = module_of(&dir, f);
                let text = std::fs::read_to_string(f).unwrap();
                for (path, inline) in references(&text) {
                    if let Some(target) = resolve(&module, &path, inline, &files)
                        && target != module
                    {
                        graph.entry(module.clone()).or_default().insert(target);
                    }
                }
            }
            // Report every cycle: take one edge out of each found, then look again.
            while let Some(c) = find_cycle(&graph) {
                cycles.push(format!("{krate}/{src}: {}", c.join(" -> ")));
                let n = c.len();
                let split = |m: &String| -> Vec<String> {
                    m.split("::")
                        .filter(|s| !s.is_empty())
                        .map(String::from)
                        .collect()
                };
                let (from, to) = (split(&c[n - 2]), split(&c[n - 1]));
                graph.get_mut(&from).unwrap().remove(&to);
            }
        }
    }
    assert!(
        cycles.is_empty(),
        "import cycles between files:\n{}",
        cycles.join("\n")
    );
}

fn names_outside(word: &str, owner: &str) -> Vec<String> {
    names_outside_of(word, &[owner], |_| true)
}

/// Where `word` is named in code outside every one of `owners`, in the
/// files `scanned` keeps (by their path from the workspace root).
fn names_outside_of(word: &str, owners: &[&str], scanned: impl Fn(&str) -> bool) -> Vec<String> {
    let mut hits = Vec::new();
    for krate in CRATES {
        let mut list = Vec::new();
        rust_files(&workspace().join(krate), &mut list);
        for f in list {
            let rel = f
                .strip_prefix(workspace())
                .unwrap()
                .to_string_lossy()
                .to_string();
            let owned = owners.iter().any(|o| rel.starts_with(o));
            if owned || rel.starts_with("tests/tests/integration/layering.rs") || !scanned(&rel) {
                continue;
            }
            let text = std::fs::read_to_string(&f).unwrap();
            for (i, line) in text.lines().enumerate() {
                let code = line.split("//").next().unwrap_or("");
                if code.contains(word) {
                    hits.push(format!("{rel}:{}: {}", i + 1, line.trim()));
                }
            }
        }
    }
    hits
}

/// `tests/tests/` holds one test binary, `integration/`, whose `main.rs`
/// declares every other file there as a module. A file directly in
/// `tests/tests/` would be a test binary of its own (another link of
/// DataFusion); a file in `integration/` that `main.rs` does not declare
/// would never be compiled.
#[test]
fn integration_tests_are_modules_of_one_binary() {
    let tests = workspace().join("tests/tests");
    let names = |dir: &Path| -> BTreeSet<String> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect()
    };
    assert_eq!(
        names(&tests),
        BTreeSet::from(["integration".to_string()]),
        "tests/tests/ holds only integration/: put a new test file in it"
    );
    let dir = tests.join("integration");
    let files: BTreeSet<String> = names(&dir)
        .into_iter()
        .filter(|n| n != "main.rs")
        .map(|n| n.strip_suffix(".rs").map_or(n.clone(), str::to_string))
        .collect();
    let main = std::fs::read_to_string(dir.join("main.rs")).unwrap();
    let declared: BTreeSet<String> = main
        .lines()
        .filter_map(|l| l.strip_prefix("mod ")?.strip_suffix(';'))
        .map(str::to_string)
        .collect();
    assert_eq!(
        files, declared,
        "every file of tests/tests/integration/ is a `mod` line of its main.rs"
    );
}

#[test]
fn only_the_leader_module_names_etcd() {
    let hits = names_outside("etcd_client", "driver/src/leader/");
    assert!(
        hits.is_empty(),
        "etcd_client named outside driver/src/leader/:\n{}",
        hits.join("\n")
    );
}

#[test]
fn only_storage_names_object_store() {
    let hits = names_outside("object_store", "common/src/storage/");
    assert!(
        hits.is_empty(),
        "object_store named outside common/src/storage/:\n{}",
        hits.join("\n")
    );
}

#[test]
fn only_the_kafka_crate_names_krafka() {
    let hits = names_outside("krafka", "kafka/");
    assert!(
        hits.is_empty(),
        "krafka named outside kafka/:\n{}",
        hits.join("\n")
    );
}

#[test]
fn only_the_kafka_crate_names_kafka_protocol() {
    let hits = names_outside("kafka_protocol", "kafka/");
    assert!(
        hits.is_empty(),
        "kafka_protocol named outside kafka/:\n{}",
        hits.join("\n")
    );
}

/// SCRAM's base64 and the system's CA certificates of a Kafka connection
/// without `ssl_ca` are the Kafka client's alone in the product (the
/// tests' harness may use them for other servers): no other crate of the
/// product names them or depends on them, nor on the client's own crates.
#[test]
fn only_the_kafka_crate_names_its_sasl_and_tls_crates() {
    let product = |rel: &str| PRODUCT.iter().any(|k| rel.starts_with(&format!("{k}/")));
    let mut hits = Vec::new();
    for word in ["base64", "rustls_native_certs"] {
        hits.extend(names_outside_of(word, &["kafka/"], product));
    }
    let deps = ["krafka", "kafka-protocol", "base64", "rustls-native-certs"];
    for krate in PRODUCT.iter().filter(|k| **k != "kafka") {
        let manifest = workspace().join(krate).join("Cargo.toml");
        let text = std::fs::read_to_string(&manifest).unwrap();
        hits.extend(
            text.lines()
                .filter(|l| deps.contains(&l.trim_start().split(['.', ' ', '=']).next().unwrap()))
                .map(|l| format!("{krate}/Cargo.toml: {l}")),
        );
    }
    assert!(
        hits.is_empty(),
        "the Kafka client's SASL and TLS crates named outside kafka/:\n{}",
        hits.join("\n")
    );
}

#[test]
fn only_sql_names_datafusion() {
    let hits: Vec<String> = names_outside("datafusion::", "sql/")
        .into_iter()
        .chain(names_outside("use datafusion", "sql/"))
        .filter(|h| !h.starts_with("tests/src/oracle.rs:"))
        .collect();
    assert!(
        hits.is_empty(),
        "datafusion named outside sql/ and the tests' oracle:\n{}",
        hits.join("\n")
    );
}

#[test]
fn the_product_does_not_depend_on_the_benchmarks() {
    let mut hits = Vec::new();
    for krate in PRODUCT {
        let manifest = workspace().join(krate).join("Cargo.toml");
        let text = std::fs::read_to_string(&manifest).unwrap();
        hits.extend(
            text.lines()
                .filter(|l| BENCH_CRATES.iter().any(|c| l.trim_start().starts_with(c)))
                .map(|l| format!("{krate}/Cargo.toml: {l}")),
        );
        let mut list = Vec::new();
        rust_files(&workspace().join(krate), &mut list);
        for f in list {
            let text = std::fs::read_to_string(&f).unwrap();
            hits.extend(
                text.lines()
                    .filter(|l| {
                        let code = l.split("//").next().unwrap_or("");
                        BENCH_CRATES
                            .iter()
                            .any(|c| code.contains(&c.replace('-', "_")))
                    })
                    .map(|l| format!("{}: {}", f.display(), l.trim())),
            );
        }
    }
    assert!(
        hits.is_empty(),
        "the product names the benchmarks' crates:\n{}",
        hits.join("\n")
    );
}

#[test]
fn the_reader_expands_use_trees() {
    assert_eq!(
        expand("crate::{a, b::{c, d}}"),
        vec!["crate::a", "crate::b::c", "crate::b::d"]
    );
    let files: BTreeSet<Vec<String>> =
        [vec![], vec!["q".to_string()], vec!["q".into(), "r".into()]]
            .into_iter()
            .collect();
    let m = vec!["q".to_string(), "r".to_string()];
    assert_eq!(
        resolve(&m, "super::x", false, &files),
        Some(vec!["q".to_string()])
    );
    assert_eq!(resolve(&m, "super::x", true, &files), Some(m.clone()));
    assert_eq!(
        resolve(&m, "crate::q::r::f", false, &files),
        Some(m.clone())
    );
}

/// The kinds of a query's sink, of a task's sink and of its report are
/// matched on only in the sink modules (`driver/src/sink/`,
/// `executor/src/sink/`) and in the spec (`common/src/spec*`), which makes
/// the task's sink: production code elsewhere goes through their traits
/// and accessors. Tests may build and read any kind.
#[test]
fn only_the_sink_modules_match_on_sink_kinds() {
    let owners = ["driver/src/sink/", "executor/src/sink/", "common/src/spec"];
    // Production code: each crate's `src/`, less its test files; inline
    // test modules (`confine.rs`'s) are listed by name.
    let production = |rel: &str| {
        ["common/", "driver/", "executor/", "cli/", "plan/", "sql/"]
            .iter()
            .any(|k| rel.starts_with(&format!("{k}src/")))
            && !rel.ends_with("tests.rs")
            && rel != "executor/src/confine.rs"
    };
    let mut hits = Vec::new();
    for word in ["task_sink::Kind::", "task_output::Sink::", "SinkSpec::"] {
        hits.extend(names_outside_of(word, &owners, production));
    }
    assert!(
        hits.is_empty(),
        "sink kinds matched outside the sink modules:\n{}",
        hits.join("\n")
    );
}
