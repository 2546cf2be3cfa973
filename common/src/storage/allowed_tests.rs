//! Tests of [`AllowedPaths`]: parsing, lexical checks by whole segments,
//! buckets, and symbolic links on a real directory tree.

use std::os::unix::fs::symlink;

use super::*;

fn allowed(prefixes: &[&str]) -> AllowedPaths {
    AllowedPaths::parse(prefixes).unwrap()
}

#[test]
fn prefixes_are_absolute_paths_or_urls() {
    let a = allowed(&["/data/in/", "file:///data/out", "s3://bucket/x/", "gs://b"]);
    assert_eq!(
        a.prefixes(),
        ["/data/in", "/data/out", "s3://bucket/x", "gs://b/"]
    );
    assert_eq!(
        allowed(&["/data/x/../in/.", "/data/in"]).prefixes(),
        ["/data/in"]
    );
    assert_eq!(
        a.to_string(),
        "[/data/in, /data/out, s3://bucket/x, gs://b/]"
    );
    for (bad, why) in [
        ("data/in", "not an absolute path"),
        ("file://data", "not an absolute path"),
        ("http://host/x", "unsupported"),
        ("s3:///x", "no bucket"),
        ("s3://b/x/../y", "segment"),
        ("", "empty"),
        (" ", "empty"),
    ] {
        let err = AllowedPaths::parse(&["/ok", bad]).unwrap_err();
        assert!(err.contains(why), "{bad:?}: {err}");
    }
    assert!(AllowedPaths::parse::<&str>(&[]).is_err());
}

#[test]
fn a_location_is_allowed_by_whole_segments_after_normalizing() {
    let a = allowed(&["/data/out"]);
    for ok in [
        "/data/out",
        "/data/out/",
        "/data/out/a/b",
        "file:///data/out/a",
        "/data/x/../out/./a",
        "/data//out",
    ] {
        assert!(a.check("sink.files.path", ok).is_ok(), "{ok}");
    }
    for refused in [
        "/data/out-2",
        "/data/outer/x",
        "/data",
        "/",
        "/data/out/../x",
        "/data/out/../../etc",
        "/other/data/out",
        "s3://data/out",
    ] {
        let err = a.check("sink.files.path", refused).unwrap_err();
        assert!(
            err.starts_with("sink.files.path: ") && err.contains("[/data/out]"),
            "{refused}: {err}"
        );
    }
    let err = a.check("tables.t.path", "rel/x").unwrap_err();
    assert!(err.starts_with("tables.t.path: "), "{err}");
    assert!(allowed(&["/"]).check("f", "/anything/at/all").is_ok());
}

#[test]
fn bucket_prefixes_match_in_their_bucket_by_whole_segments() {
    let a = allowed(&["s3://bucket/data/out", "gs://whole"]);
    for ok in [
        "s3://bucket/data/out",
        "s3://bucket/data/out/",
        "s3://bucket/data/out/x/y",
        "gs://whole",
        "gs://whole/any/key",
    ] {
        assert!(a.check("f", ok).is_ok(), "{ok}");
    }
    for refused in [
        "s3://bucket/data/out-2",
        "s3://bucket/data",
        "s3://other/data/out",
        "gs://bucket/data/out",
        "az://whole/x",
        "/bucket/data/out",
        "s3://bucket/data/out/../x",
    ] {
        assert!(a.check("f", refused).is_err(), "{refused}");
    }
}

#[test]
fn the_data_directory_holds_the_checkpoint_root() {
    let of = |root: &str| AllowedPaths::data_dir_of(root).unwrap().prefixes();
    assert_eq!(of("/data/checkpoints"), ["/data"]);
    assert_eq!(of("/data/checkpoints/"), ["/data"]);
    assert_eq!(of("file:///srv/sluice/ckpt"), ["/srv/sluice"]);
    assert_eq!(of("/ckpt"), ["/"]);
    assert_eq!(of("s3://bucket/ckpt"), ["s3://bucket/"]);
    assert_eq!(of("s3://bucket/a/ckpt"), ["s3://bucket/a"]);
    assert_eq!(of("s3://bucket"), ["s3://bucket/"]);
    assert!(AllowedPaths::data_dir_of("ckpt").is_err());
}

#[test]
fn a_task_file_is_checked_under_its_root() {
    let a = allowed(&["/data/in", "s3://b/in"]);
    assert!(a.check_file_resolved("f", "/data/in", "x.jsonl").is_ok());
    assert!(a.check_file_resolved("f", "/data", "in/x.jsonl").is_ok());
    let err = a
        .check_file_resolved("f", "/data/in", "../secret/x")
        .unwrap_err();
    assert!(err.contains("/data/in/../secret/x"), "{err}");
    assert!(a.check_file_resolved("f", "/data", "other.csv").is_err());
    assert!(a.check_file_resolved("f", "s3://b/in", "k/x#1").is_ok());
    let err = a.check_file_resolved("f", "s3://b", "out/x").unwrap_err();
    assert!(err.contains("s3://b/out/x"), "{err}");
}

/// `<tmp>/allowed` (the prefix) and `<tmp>/outside`, with links between.
struct Tree {
    _dir: tempfile::TempDir,
    allowed: PathBuf,
    outside: PathBuf,
}

fn tree() -> Tree {
    let dir = tempfile::tempdir().unwrap();
    let (allowed, outside) = (dir.path().join("allowed"), dir.path().join("outside"));
    std::fs::create_dir_all(allowed.join("in")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret.jsonl"), "{}\n").unwrap();
    Tree {
        allowed: allowed.clone(),
        outside,
        _dir: dir,
    }
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn links_that_lead_outside_are_refused_once_resolved() {
    let t = tree();
    let a = allowed(&[s(&t.allowed)]);
    symlink(&t.outside, t.allowed.join("out")).unwrap();
    symlink("../outside", t.allowed.join("relative")).unwrap();
    symlink(t.outside.join("not-yet"), t.allowed.join("dangling")).unwrap();
    symlink(t.allowed.join("in"), t.allowed.join("alias")).unwrap();
    for name in [
        "out",
        "out/new/deeper",
        "relative",
        "dangling",
        "dangling/x",
    ] {
        let p = t.allowed.join(name);
        assert!(a.check(SINK, s(&p)).is_ok(), "lexically inside: {name}");
        let err = a.check_resolved(SINK, s(&p)).unwrap_err();
        assert!(
            err.starts_with("sink.files.path: ")
                && err.contains(s(&p))
                && err.contains(&format!("resolves to {}", t.outside.display()))
                && err.contains(&a.to_string()),
            "{name}: {err}"
        );
    }
    for name in ["in", "alias", "alias/x", "new/deeper", "in/../in"] {
        let p = t.allowed.join(name);
        assert!(a.check_resolved(SINK, s(&p)).is_ok(), "{name}");
    }
    // On disk `out/..` is the parent of `outside`, not `allowed`: `..`
    // after a link goes where the link led.
    for (name, ok) in [
        ("out/../allowed/in", true),
        ("out/../outside", false),
        ("out/../in", false),
    ] {
        let p = t.allowed.join(name);
        assert!(a.check(SINK, s(&p)).is_ok(), "lexically inside: {name}");
        assert_eq!(a.check_resolved(SINK, s(&p)).is_ok(), ok, "{name}");
    }
}

const SINK: &str = "sink.files.path";

#[test]
fn a_prefix_that_is_a_link_allows_where_it_leads() {
    let t = tree();
    let link = t.allowed.join("to-outside");
    symlink(&t.outside, &link).unwrap();
    let a = allowed(&[s(&link)]);
    assert!(a.check_resolved("f", s(&link.join("secret.jsonl"))).is_ok());
    // Named through the link's target, it is not under the prefix as
    // written.
    assert!(
        a.check_resolved("f", s(&t.outside.join("secret.jsonl")))
            .is_err()
    );
}

#[test]
fn input_files_and_links_inside_an_input_directory_are_resolved() {
    let t = tree();
    let a = allowed(&[s(&t.allowed)]);
    let input = t.allowed.join("in");
    std::fs::write(input.join("a.jsonl"), "{}\n").unwrap();
    symlink(input.join("a.jsonl"), input.join("b.jsonl")).unwrap();
    symlink(t.outside.join("secret.jsonl"), input.join(".hidden")).unwrap();
    assert!(
        a.check_input_resolved("source.files.path", s(&input))
            .is_ok()
    );
    symlink(t.outside.join("secret.jsonl"), input.join("c.jsonl")).unwrap();
    let err = a
        .check_input_resolved("source.files.path", s(&input))
        .unwrap_err();
    assert!(
        err.starts_with("source.files.path: ") && err.contains("c.jsonl"),
        "{err}"
    );
    let err = a
        .check_file_resolved("source.files.path", s(&input), "c.jsonl")
        .unwrap_err();
    assert!(err.contains("secret.jsonl"), "{err}");
    assert!(
        a.check_file_resolved("source.files.path", s(&input), "b.jsonl")
            .is_ok()
    );
    // A table that is one file, a link to outside.
    let err = a
        .check_input_resolved("tables.t.path", s(&input.join("c.jsonl")))
        .unwrap_err();
    assert!(err.starts_with("tables.t.path: "), "{err}");
}

#[test]
fn resolving_stops_on_a_loop_of_links() {
    let t = tree();
    symlink(t.allowed.join("b"), t.allowed.join("a")).unwrap();
    symlink(t.allowed.join("a"), t.allowed.join("b")).unwrap();
    let real = resolve(&t.allowed.join("a/x"));
    assert!(real.ends_with("x"), "{}", real.display());
}
