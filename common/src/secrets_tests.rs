use std::path::Path;
use std::time::{Duration, Instant};

use super::*;

const FIELD: &str = "sink.kafka.security.ssl_ca";

fn in_dir(dir: &Path) -> Secrets {
    Secrets::new(Some(dir), &["KAFKA_"]).unwrap()
}

fn err(r: Result<impl std::fmt::Debug>) -> String {
    r.expect_err("refused").to_string()
}

#[test]
fn without_the_flags_no_file_and_no_variable_is_read() {
    let none = Secrets::default();
    let e = err(none.read_file(FIELD, "/etc/hostname"));
    assert!(e.contains(FIELD) && e.contains("no --secrets-dir"), "{e}");
    let e = err(none.read_env("sink.kafka.security.sasl_password_env", "SLUICE_DRIVER"));
    assert!(
        e.contains("sink.kafka.security.sasl_password_env") && e.contains("no --secret-env-prefix"),
        "{e}"
    );
    assert_eq!(Secrets::new::<&str>(None, &[]).unwrap(), none);
}

#[test]
fn a_file_is_read_inside_the_directory_by_a_relative_or_absolute_path() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("kafka")).unwrap();
    std::fs::write(dir.path().join("kafka/ca.pem"), "CA").unwrap();
    let s = in_dir(dir.path());
    assert_eq!(&s.read_file(FIELD, "kafka/ca.pem").unwrap()[..], b"CA");
    assert_eq!(&s.read_file(FIELD, "./kafka/./ca.pem").unwrap()[..], b"CA");
    let absolute = dir.path().join("kafka/ca.pem");
    assert_eq!(
        &s.read_file(FIELD, absolute.to_str().unwrap()).unwrap()[..],
        b"CA"
    );
    let e = err(s.read_file(FIELD, "kafka/missing.pem"));
    assert!(
        e.contains(FIELD) && e.contains("kafka/missing.pem cannot be read"),
        "{e}"
    );
}

/// Kubernetes mounts a Secret's keys as links to a hidden directory
/// beside them, swapped on rotation.
#[test]
fn links_inside_the_directory_are_followed() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("..2026_01_01");
    std::fs::create_dir(&data).unwrap();
    std::fs::write(data.join("password"), "pw\n").unwrap();
    std::os::unix::fs::symlink("..2026_01_01", dir.path().join("..data")).unwrap();
    std::os::unix::fs::symlink("..data/password", dir.path().join("password")).unwrap();
    // The directory itself may be reached through a link.
    let link = tempfile::tempdir().unwrap();
    let via = link.path().join("secrets");
    std::os::unix::fs::symlink(dir.path(), &via).unwrap();
    for s in [in_dir(dir.path()), in_dir(&via)] {
        assert_eq!(&s.read_file(FIELD, "password").unwrap()[..], b"pw\n");
    }
    let s = in_dir(&via);
    let real = dir.path().join("password");
    assert_eq!(
        &s.read_file(FIELD, real.to_str().unwrap()).unwrap()[..],
        b"pw\n"
    );
}

#[test]
fn a_path_outside_gets_one_error_whether_it_exists_or_not() {
    let dir = tempfile::tempdir().unwrap();
    let s = in_dir(dir.path());
    let outside = tempfile::tempdir().unwrap();
    let there = outside.path().join("key.pem");
    std::fs::write(&there, "KEY").unwrap();
    let missing = outside.path().join("nothing.pem");
    let shown = |path: &Path| {
        let p = path.to_str().unwrap();
        err(s.read_file(FIELD, p)).replace(p, "<path>")
    };
    let e = shown(&there);
    assert_eq!(e, shown(&missing));
    assert_eq!(e, shown(Path::new("/etc/hostname")));
    assert_eq!(e, shown(Path::new("/no/such/dir/x")));
    assert!(
        e.contains(FIELD) && e.contains("<path> is outside --secrets-dir"),
        "{e}"
    );
    // A link inside that leads out is outside, in the same words.
    std::os::unix::fs::symlink(&there, dir.path().join("leak")).unwrap();
    std::os::unix::fs::symlink("/etc", dir.path().join("etc")).unwrap();
    for name in ["leak", "etc/hostname"] {
        let e = err(s.read_file(FIELD, name)).replace(name, "<path>");
        assert_eq!(e, shown(&there));
    }
    // `..` is refused by its words, before the disk.
    for path in ["../x", "a/../../x", "a/.."] {
        let e = err(s.check_file(FIELD, path));
        assert!(e.contains("has a `..` in it"), "{path}: {e}");
    }
    // A sibling that shares the name's start is outside.
    let sibling = format!("{}-other/x", dir.path().display());
    assert!(err(s.check_file(FIELD, &sibling)).contains("is outside"));
    // The directory itself is no file.
    assert!(err(s.check_file(FIELD, dir.path().to_str().unwrap())).contains("is outside"));
}

#[test]
fn pipes_devices_and_large_files_in_the_directory_are_refused_promptly() {
    let dir = tempfile::tempdir().unwrap();
    let made = std::process::Command::new("mkfifo")
        .arg(dir.path().join("fifo"))
        .status()
        .unwrap();
    assert!(made.success());
    let big = std::fs::File::create(dir.path().join("big")).unwrap();
    big.set_len(64 << 30).unwrap();
    let started = Instant::now();
    let e = err(in_dir(dir.path()).read_file(FIELD, "fifo"));
    assert!(
        e.contains("is a named pipe (FIFO), not a regular file"),
        "{e}"
    );
    let e = err(in_dir(dir.path()).read_file(FIELD, "big"));
    assert!(e.contains("is larger than 1 MiB"), "{e}");
    let e = err(in_dir(Path::new("/dev")).read_file(FIELD, "zero"));
    assert!(
        e.contains(FIELD) && e.contains("zero is a character device"),
        "{e}"
    );
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[test]
fn a_variable_needs_an_allowed_prefix() {
    let f = "source.kafka.security.sasl_password_env";
    let s = Secrets::new::<&str>(None, &["KAFKA_", " ", "APP_PW_"]).unwrap();
    assert_eq!(s.env_prefixes(), ["KAFKA_", "APP_PW_"]);
    let e = err(s.read_env(f, "SLUICE_DRIVER"));
    assert!(
        e.contains(f) && e.contains("SLUICE_DRIVER does not start with a prefix of --secret-env-prefix (KAFKA_, APP_PW_)"),
        "{e}"
    );
    s.check_env(f, "KAFKA_PASSWORD").unwrap();
    let e = err(s.read_env(f, "KAFKA_SLUICE_TEST_UNSET_VARIABLE"));
    assert!(e.contains("is not set in this process"), "{e}");
    // PATH is set in every process: it is read only with its prefix.
    let path = Secrets::new::<&str>(None, &["PAT"]).unwrap();
    assert_eq!(
        *path.read_env(f, "PATH").unwrap(),
        std::env::var("PATH").unwrap()
    );
}

#[test]
fn bad_flags_are_named() {
    let e = Secrets::new::<&str>(Some(Path::new("rel/dir")), &[]).unwrap_err();
    assert!(
        e.contains("--secrets-dir rel/dir") && e.contains("absolute"),
        "{e}"
    );
    let e = Secrets::new::<&str>(Some(Path::new("/no/such/secrets")), &[]).unwrap_err();
    assert!(e.contains("--secrets-dir /no/such/secrets"), "{e}");
    let e = Secrets::new::<&str>(Some(Path::new("/etc/hostname")), &[]).unwrap_err();
    assert!(e.contains("not a directory"), "{e}");
    for bad in ["SLUICE_", "SLU", "SLUICE_KAFKA_", "A-B", "A B"] {
        let e = Secrets::new::<&str>(None, &[bad]).unwrap_err();
        assert!(e.contains("--secret-env-prefix"), "{bad}: {e}");
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("x")).unwrap();
    let given = dir.path().join(".").join("x").join("..");
    let s = Secrets::new::<&str>(Some(&given), &[]).unwrap();
    assert_eq!(s.dir(), Some(dir.path()));
}
