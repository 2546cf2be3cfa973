//! Where a spec's Kafka secrets may come from, through real drivers and
//! executors: files only inside `--secrets-dir`, variables only with a
//! prefix of `--secret-env-prefix`, and only regular files of at most
//! 1 MiB. A spec that names anything else is refused at submit, naming the
//! field and the flag, before a byte goes to the brokers it names; an
//! executor refuses again when its task connects.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use sluice_common::spec::SaslMechanism;
use sluice_tests::Client;
use sluice_tests::cluster::{Cluster, DriverOpts, ExecutorOpts};
use sluice_tests::kafka::{self, Broker, SCHEMA, ScramUser, login, secrets_args, secrets_dir};
use sluice_tests::node::{Driver, READY_TIMEOUT};
use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;

/// A port that stands for the spec's broker: it counts the connections
/// and bytes sent to it, as a logging proxy would see them.
struct Listener {
    servers: String,
    received: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Listener {
    async fn start() -> Listener {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let servers = listener.local_addr().unwrap().to_string();
        let received = Arc::new(AtomicUsize::new(0));
        let count = received.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                // A connection counts even when nothing comes over it.
                count.fetch_add(1, Ordering::SeqCst);
                let count = count.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 4096];
                    while let Ok(n) = conn.read(&mut buf).await {
                        if n == 0 {
                            break;
                        }
                        count.fetch_add(n, Ordering::SeqCst);
                    }
                });
            }
        });
        Listener {
            servers,
            received,
            task,
        }
    }

    /// Connections and bytes received so far.
    fn received(&self) -> usize {
        self.received.load(Ordering::SeqCst)
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A query from a rate source into the Kafka sink at `servers`, secured by
/// `security` (flow YAML).
fn sink_spec(name: &str, servers: &str, security: &str) -> String {
    format!(
        "name: {name}\nsource:\n  rate: {{rows_per_second: 10, partitions: 1}}\n\
         sql: SELECT value FROM input\n\
         sink:\n  kafka:\n    bootstrap_servers: {servers}\n    topic: out\n    security: {security}\n"
    )
}

/// A query from the Kafka source at `servers`, secured by `security`.
fn source_spec(name: &str, servers: &str, security: &str, sink: &Path) -> String {
    format!(
        "name: {name}\nsource:\n  kafka:\n    bootstrap_servers: {servers}\n    topic: input\n    \
         schema: {SCHEMA}\n    security: {security}\n\
         sink:\n  files:\n    path: {}\n    format: jsonl\n",
        sink.display()
    )
}

fn sasl_file(path: &str) -> String {
    format!(
        "{{protocol: sasl_plaintext, sasl_mechanism: PLAIN, sasl_username: u, \
         sasl_password_file: '{path}'}}"
    )
}

async fn ready_driver(cluster: &Cluster, extra_args: Vec<String>) -> Driver {
    let driver = cluster.start_driver_with(DriverOpts {
        extra_args,
        ..Default::default()
    });
    driver.wait_ready(READY_TIMEOUT).await;
    driver
}

/// Submits `spec`, expects `INVALID_ARGUMENT` within `within`, and returns
/// its message.
async fn refused(driver: &Driver, spec: &str, within: Duration) -> String {
    let mut client = Client::new(driver.addr());
    let started = Instant::now();
    let err = client.submit(spec).await.expect_err("refused at submit");
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    assert!(
        started.elapsed() < within,
        "refused in {:?}, not within {within:?}: {}",
        started.elapsed(),
        err.message()
    );
    err.message().to_string()
}

/// Without `--secrets-dir` and `--secret-env-prefix` a spec that names a
/// file or a variable is refused, naming the field and the flag, and
/// nothing reaches the broker it names; with them, a path outside the
/// directory is refused in the same words whether it exists or not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_and_variables_outside_the_operators_secrets_are_refused_at_submit() {
    let cluster = Cluster::new("kafka-secrets-policy");
    let broker = Listener::start().await;
    let servers = broker.servers.clone();
    let driver = ready_driver(&cluster, Vec::new()).await;
    let sink = cluster.sink_path("q");
    for (spec, field, flag) in [
        (
            sink_spec("q", &servers, &sasl_file("/etc/hostname")),
            "sink.kafka.security.sasl_password_file",
            "--secrets-dir",
        ),
        (
            sink_spec(
                "q",
                &servers,
                "{protocol: sasl_plaintext, sasl_mechanism: PLAIN, sasl_username: u, \
                 sasl_password_env: SLUICE_DRIVER}",
            ),
            "sink.kafka.security.sasl_password_env",
            "--secret-env-prefix",
        ),
        (
            source_spec("q", &servers, "{protocol: ssl, ssl_ca: /etc/shadow}", &sink),
            "source.kafka.security.ssl_ca",
            "--secrets-dir",
        ),
    ] {
        let message = refused(&driver, &spec, Duration::from_secs(5)).await;
        assert!(
            message.contains(field) && message.contains(&format!("this process has no {flag}")),
            "{message}"
        );
    }

    // With the flags, a path outside the directory: one answer whether the
    // file exists or not; a variable without the prefix: refused.
    driver.process().kill();
    let dir = secrets_dir(&cluster);
    let driver = ready_driver(&cluster, secrets_args(&cluster)).await;
    let mut answers = Vec::new();
    for path in ["/etc/hostname", "/etc/no-such-file-here", "../checkpoint/x"] {
        let message = refused(
            &driver,
            &sink_spec("q", &servers, &sasl_file(path)),
            Duration::from_secs(5),
        )
        .await;
        assert!(
            message.contains("sink.kafka.security.sasl_password_file"),
            "{message}"
        );
        answers.push(message.replace(path, "<path>"));
    }
    assert_eq!(answers[0], answers[1]);
    assert!(
        answers[0].contains(&format!(
            "<path> is outside --secrets-dir {}",
            dir.display()
        )),
        "{}",
        answers[0]
    );
    assert!(answers[2].contains("has a `..` in it"), "{}", answers[2]);
    let message = refused(
        &driver,
        &sink_spec(
            "q",
            &servers,
            "{protocol: sasl_plaintext, sasl_mechanism: PLAIN, sasl_username: u, \
             sasl_password_env: SLUICE_DRIVER}",
        ),
        Duration::from_secs(5),
    )
    .await;
    assert!(
        message.contains("sink.kafka.security.sasl_password_env")
            && message
                .contains("SLUICE_DRIVER does not start with a prefix of --secret-env-prefix"),
        "{message}"
    );
    assert_eq!(
        broker.received(),
        0,
        "nothing may reach the broker of a refused spec"
    );
    assert!(Client::new(driver.addr()).list().await.unwrap().is_empty());
}

/// The peak resident memory of process `pid` (`VmHWM`), in bytes.
fn peak_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM");
    kib * 1024
}

/// A device, a named pipe and a file far over the cap, each named as a
/// secret inside `--secrets-dir`: refused promptly by field, unread, the
/// driver's memory unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn devices_pipes_and_huge_files_are_refused_promptly_and_unread() {
    let cluster = Cluster::new("kafka-secrets-files");
    let broker = Listener::start().await;
    let servers = broker.servers.clone();
    let dir = secrets_dir(&cluster);
    let made = std::process::Command::new("mkfifo")
        .arg(dir.join("fifo"))
        .status()
        .unwrap();
    assert!(made.success());
    let big = std::fs::File::create(dir.join("big.pem")).unwrap();
    big.set_len(64 << 30).unwrap();

    let driver = ready_driver(&cluster, secrets_args(&cluster)).await;
    let pid = driver.process().pid().expect("the driver runs");
    let before = peak_bytes(pid);
    for (security, field, why) in [
        (
            sasl_file("fifo"),
            "sink.kafka.security.sasl_password_file",
            "fifo is a named pipe (FIFO), not a regular file",
        ),
        (
            "{protocol: ssl, ssl_ca: big.pem}".to_string(),
            "sink.kafka.security.ssl_ca",
            "big.pem is larger than 1 MiB",
        ),
    ] {
        let spec = sink_spec("q", &servers, &security);
        let message = refused(&driver, &spec, Duration::from_secs(3)).await;
        assert!(
            message.contains(field) && message.contains(why),
            "{message}"
        );
    }
    assert_unread(pid, before);
    driver.process().kill();

    // /dev/zero, in a secrets directory that holds it.
    let dev = vec!["--secrets-dir".to_string(), "/dev".into()];
    let driver = ready_driver(&cluster, dev).await;
    let pid = driver.process().pid().expect("the driver runs");
    let before = peak_bytes(pid);
    let spec = sink_spec("q", &servers, "{protocol: ssl, ssl_ca: /dev/zero}");
    let message = refused(&driver, &spec, Duration::from_secs(3)).await;
    assert!(
        message.contains("sink.kafka.security.ssl_ca")
            && message.contains("/dev/zero is a character device, not a regular file"),
        "{message}"
    );
    assert_unread(pid, before);
    assert_eq!(broker.received(), 0, "nothing reaches the broker");
}

/// The peak memory of process `pid` grew by less than 64 MiB from `before`.
fn assert_unread(pid: u32, before: u64) {
    let now = peak_bytes(pid);
    assert!(
        now < before + (64 << 20),
        "the driver's peak memory grew from {before} to {now} bytes"
    );
}

/// The executor checks again: a driver that may read the password file
/// plans the query, an executor without `--secrets-dir` refuses to read it
/// and the query fails, naming the field and the flag.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_executor_without_the_secrets_dir_refuses_its_task() {
    let cluster = Cluster::new("kafka-secrets-executor");
    let bob = ScramUser::new("bob", "bob-pw-512", SaslMechanism::ScramSha512);
    let broker = Broker::start_secured(&cluster, std::slice::from_ref(&bob), None, false).await;
    broker.create_topic("input", 1).await;
    kafka::produce(&broker.client().await, "input", 1, 0..10).await;
    let security = login(
        &cluster,
        &Default::default(),
        &bob.name,
        &bob.password,
        bob.mechanism,
    );
    // Relative to the secrets directory, as a spec would name it.
    let file = security.sasl_password_file.clone().unwrap();
    let name = Path::new(&file).file_name().unwrap().to_str().unwrap();
    let flow = serde_json::to_string(&sluice_common::spec::KafkaSecurity {
        sasl_password_file: Some(name.to_string()),
        ..security
    })
    .unwrap();

    let driver = ready_driver(&cluster, secrets_args(&cluster)).await;
    let _executor = cluster.start_executor_with(driver.addr(), ExecutorOpts::default());
    let mut client = Client::new(driver.addr());
    let sink = cluster.sink_path("q");
    client
        .submit(&source_spec("q", &broker.servers(), &flow, &sink))
        .await
        .expect("the driver may read the password");
    let status = client
        .wait_state(
            "q",
            sluice_proto::QueryState::Failed,
            Duration::from_secs(60),
        )
        .await;
    let error = status.error;
    assert!(
        error.contains("source.kafka.security.sasl_password_file")
            && error.contains("this process has no --secrets-dir"),
        "{error}"
    );
    assert!(!error.contains("bob-pw-512"), "{error}");
}
