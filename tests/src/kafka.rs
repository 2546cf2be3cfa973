//! A real Kafka-compatible broker for the Kafka source's tests: `tansu`
//! with SQLite storage in the cluster's directory, on a free loopback port,
//! started as a cluster process (killed with the cluster, even on panic).
//! Records are produced through Sluice's own client.
//!
//! The binary is `$SLUICE_TANSU_BIN`, else the one `scripts/deps.sh test`
//! builds into `$HOME/.cache/sluice/tansu-0.6.0/bin/tansu`.
//!
//! tansu has no transactions. The tests that need them start `noida-db`
//! ([`Broker::start_transactional`]) and write with [`Transaction`]:
//! confluent-kafka (librdkafka), a producer independent of Sluice's client,
//! both from the pinned venv `target/kafka/venv`.
//!
//! [`Broker::start_secured`] starts a tansu that requires SASL (SCRAM-SHA-256
//! and SCRAM-SHA-512 users; tansu 0.6.0 has no PLAIN) and, with a
//! [`KafkaPki`], TLS in front of it ([`crate::kafka_tls`]: tansu 0.6.0 has no
//! TLS of its own).
//!
//! Secrets (password files, the PKI) are in the cluster's secrets
//! directory ([`secrets_dir`]): drivers and executors that read them are
//! started with [`secrets_args`], and the tests' own clients read them as
//! [`secrets`] allows, as Sluice's processes do.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sluice_common::secrets::Secrets;
use sluice_common::spec::{KafkaSecurity, SaslMechanism, SecurityProtocol};
use sluice_kafka::{Kafka, KafkaRecord, NewRecord};
use sluice_proto::{PartitionProgress, QueryState, QueryStatus};

use crate::client::Client;
use crate::cluster::Cluster;
pub use crate::kafka_tls::KafkaPki;
use crate::kafka_tls::TlsFront;
use crate::node::{Driver, Executor};
use crate::ports::free_port;
use crate::process::Process;

/// How long a fresh broker may take to answer.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a test waits for a query to read what it expects.
const WAIT: Duration = Duration::from_secs(60);

/// The prefix of the environment variables the tests' specs may name.
pub const SECRET_ENV_PREFIX: &str = "KAFKA_TEST_";

/// The cluster's secrets directory (created): where [`login`] writes
/// password files, and where a test puts its [`KafkaPki`].
pub fn secrets_dir(cluster: &Cluster) -> PathBuf {
    let dir = cluster.root().join("kafka-secrets");
    std::fs::create_dir_all(&dir).expect("create the secrets directory");
    dir
}

/// The flags that let a driver or an executor read the cluster's secrets
/// (`--secrets-dir`) and variables starting with [`SECRET_ENV_PREFIX`].
pub fn secrets_args(cluster: &Cluster) -> Vec<String> {
    vec![
        "--secrets-dir".into(),
        secrets_dir(cluster).display().to_string(),
        "--secret-env-prefix".into(),
        SECRET_ENV_PREFIX.into(),
    ]
}

/// What [`secrets_args`] allows, for the tests' own clients.
pub fn secrets(cluster: &Cluster) -> Secrets {
    Secrets::new(Some(&secrets_dir(cluster)), &[SECRET_ENV_PREFIX])
        .expect("the secrets directory exists")
}

/// The `tansu` binary. Panics with the fix when there is none.
pub fn tansu_bin() -> PathBuf {
    let path = match std::env::var_os("SLUICE_TANSU_BIN") {
        Some(p) => PathBuf::from(p),
        None => {
            let home = std::env::var_os("HOME").expect("HOME is set");
            PathBuf::from(home).join(".cache/sluice/tansu-0.6.0/bin/tansu")
        }
    };
    if !path.is_file() {
        panic!(
            "tansu not found at {}: run scripts/deps.sh test, or set SLUICE_TANSU_BIN",
            path.display()
        );
    }
    path
}

/// The pinned venv of the transactional broker and producer.
fn kafka_venv() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/kafka/venv")
}

/// noida-db's broker binary in the pinned venv (the binary itself, not its
/// Python wrapper, so that a kill reaches the broker). Panics with the fix
/// when there is none.
pub fn noida_bin() -> PathBuf {
    let lib = kafka_venv().join("lib");
    let found = std::fs::read_dir(&lib).ok().and_then(|dirs| {
        dirs.flatten()
            .map(|d| d.path().join("site-packages/noida_db/noida-db"))
            .find(|p| p.is_file())
    });
    found.unwrap_or_else(|| {
        panic!(
            "noida-db not found under {}: run scripts/deps.sh test",
            lib.display()
        )
    })
}

/// One broker.
#[derive(Debug)]
pub struct Broker {
    pub process: Process,
    /// Where clients connect: the broker's port, or its TLS front's.
    port: u16,
    /// How the broker's own clients ([`Broker::client`]) connect, with
    /// the secrets they may read.
    security: KafkaSecurity,
    secrets: Secrets,
    /// TLS in front of the broker, when it has TLS.
    _front: Option<TlsFront>,
}

/// A SCRAM user of a broker started by [`Broker::start_secured`].
#[derive(Debug, Clone)]
pub struct ScramUser {
    pub name: String,
    pub password: String,
    pub mechanism: SaslMechanism,
}

impl ScramUser {
    pub fn new(name: &str, password: &str, mechanism: SaslMechanism) -> ScramUser {
        ScramUser {
            name: name.to_string(),
            password: password.to_string(),
            mechanism,
        }
    }
}

impl Broker {
    /// Starts a broker and waits until it answers.
    pub async fn start(cluster: &Cluster) -> Broker {
        Broker::start_with(cluster, &[]).await
    }

    /// Starts tansu with `extra` arguments after the usual ones, and waits
    /// until it answers.
    pub async fn start_with(cluster: &Cluster, extra: &[&str]) -> Broker {
        let port = free_port();
        let plaintext = KafkaSecurity::default();
        Broker::tansu(cluster, "tansu", (port, port), extra, plaintext, None).await
    }

    /// Starts tansu listening on `ports.0` and advertising `ports.1` to
    /// clients, with `front` (TLS) already in front of it when the two
    /// differ; waits until a client with `security` lists its topics.
    async fn tansu(
        cluster: &Cluster,
        name: &str,
        (listen, advertised): (u16, u16),
        extra: &[&str],
        security: KafkaSecurity,
        front: Option<TlsFront>,
    ) -> Broker {
        let mut args = vec![
            "broker".to_string(),
            "--listener-url".into(),
            format!("tcp://127.0.0.1:{listen}"),
            "--advertised-listener-url".into(),
            format!("tcp://127.0.0.1:{advertised}"),
            "--storage-engine".into(),
            "sqlite://kafka.db".into(),
        ];
        args.extend(extra.iter().map(|a| a.to_string()));
        let process = cluster.spawn(name, &tansu_bin(), args);
        let broker = Broker {
            process,
            port: advertised,
            security,
            secrets: secrets(cluster),
            _front: front,
        };
        broker.wait_ready().await;
        broker
    }

    /// Starts tansu requiring SASL when `users` are given (`--authentication`),
    /// behind TLS when `pki` is (mutual with `mtls`), and waits until it
    /// answers. tansu's `user create` cannot log in, so the users are
    /// created on the broker started first without `--authentication`,
    /// which is then stopped and started again with it on the same
    /// storage. The broker's own clients log in as the first user.
    pub async fn start_secured(
        cluster: &Cluster,
        users: &[ScramUser],
        pki: Option<&KafkaPki>,
        mtls: bool,
    ) -> Broker {
        if !users.is_empty() {
            let port = free_port();
            let setup = Broker::tansu(
                cluster,
                "tansu-setup",
                (port, port),
                &[],
                KafkaSecurity::default(),
                None,
            )
            .await;
            for user in users {
                create_user(port, user).await;
            }
            setup.process.kill();
        }
        let port = free_port();
        let (advertised, front) = match pki {
            Some(pki) => {
                let front = TlsFront::start(free_port(), port, pki, mtls).await;
                (front.port(), Some(front))
            }
            None => (port, None),
        };
        let tls = pki.map(|pki| KafkaSecurity {
            protocol: SecurityProtocol::Ssl,
            ssl_ca: Some(pki.file("ca.pem")),
            ssl_certificate: mtls.then(|| pki.file("client.pem")),
            ssl_key: mtls.then(|| pki.file("client-key.pem")),
            ..KafkaSecurity::default()
        });
        let tls = tls.unwrap_or_default();
        let security = match users.first() {
            Some(user) => login(cluster, &tls, &user.name, &user.password, user.mechanism),
            None => tls,
        };
        let extra: &[&str] = if users.is_empty() {
            &[]
        } else {
            &["--authentication"]
        };
        Broker::tansu(cluster, "tansu", (port, advertised), extra, security, front).await
    }

    /// Starts noida-db, a broker with transactions, with its data in the
    /// cluster's directory, and waits until it answers.
    pub async fn start_transactional(cluster: &Cluster) -> Broker {
        let port = free_port();
        let data = cluster.root().join("noida");
        let args = vec![
            "start".to_string(),
            "--only".into(),
            "kafka".into(),
            "--kafka-port".into(),
            port.to_string(),
            "--host".into(),
            "127.0.0.1".into(),
            "--data-dir".into(),
            data.display().to_string(),
        ];
        let process = cluster.spawn("noida-db", &noida_bin(), args);
        let broker = Broker {
            process,
            port,
            security: KafkaSecurity::default(),
            secrets: Secrets::default(),
            _front: None,
        };
        broker.wait_ready().await;
        broker
    }

    /// Waits until the broker lists its topics.
    pub async fn wait_ready(&self) {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let tried = async {
                let k = Kafka::connect_secure(
                    &self.servers(),
                    &self.security,
                    &self.secrets,
                    "broker",
                    Duration::from_secs(2),
                )
                .await?;
                k.topics().await
            };
            match tried.await {
                Ok(_) => return,
                Err(e) if Instant::now() > deadline => panic!(
                    "the broker did not answer on {} within {READY_TIMEOUT:?}: {e}\n{}",
                    self.servers(),
                    self.process.log_tail(30)
                ),
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    /// What `bootstrap_servers` takes.
    pub fn servers(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// How the broker's own clients connect: its TLS and first user, if any.
    pub fn security(&self) -> &KafkaSecurity {
        &self.security
    }

    /// The secrets the broker's own clients may read: the cluster's.
    pub fn secrets(&self) -> &Secrets {
        &self.secrets
    }

    /// A client of the broker.
    pub async fn client(&self) -> Kafka {
        Kafka::connect_secure(
            &self.servers(),
            &self.security,
            &self.secrets,
            "broker",
            Duration::from_secs(10),
        )
        .await
        .unwrap_or_else(|e| panic!("connect to the broker: {e}"))
    }

    /// Creates `topic` with `partitions` partitions and waits until every
    /// partition answers.
    pub async fn create_topic(&self, topic: &str, partitions: i32) {
        let k = self.client().await;
        k.create_topic(topic, partitions)
            .await
            .unwrap_or_else(|e| panic!("create topic {topic}: {e}"));
        for p in 0..partitions {
            k.partition(topic, p, true)
                .await
                .unwrap_or_else(|e| panic!("topic {topic} partition {p}: {e}"));
        }
    }
}

/// Creates a SCRAM user with `tansu user create` on the broker at `port`.
async fn create_user(port: u16, user: &ScramUser) {
    let mechanism = match user.mechanism {
        SaslMechanism::ScramSha256 => "scram256",
        SaslMechanism::ScramSha512 => "scram512",
        SaslMechanism::Plain => panic!("tansu 0.6.0 has no PLAIN users"),
    };
    let out = tokio::process::Command::new(tansu_bin())
        .args(["user", "create", &user.name, &user.password])
        .args(["--mechanism", mechanism])
        .args(["--broker", &format!("tcp://127.0.0.1:{port}")])
        .output()
        .await
        .expect("run tansu user create");
    assert!(
        out.status.success(),
        "tansu user create {}: {}",
        user.name,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `tls` (a broker's TLS settings, or plaintext) with a SASL login as
/// `user`, the password written to a file in the cluster's secrets
/// directory ([`secrets_dir`]).
pub fn login(
    cluster: &Cluster,
    tls: &KafkaSecurity,
    user: &str,
    password: &str,
    mechanism: SaslMechanism,
) -> KafkaSecurity {
    let file = secrets_dir(cluster).join(format!("{user}-{}.password", free_port()));
    std::fs::write(&file, format!("{password}\n")).expect("write a password file");
    KafkaSecurity {
        protocol: match tls.protocol.tls() {
            true => SecurityProtocol::SaslSsl,
            false => SecurityProtocol::SaslPlaintext,
        },
        sasl_mechanism: Some(mechanism),
        sasl_username: Some(user.to_string()),
        sasl_password_file: Some(file.display().to_string()),
        ..tls.clone()
    }
}

/// Changes a broker's storage the way Kafka operations it lacks would:
/// SQL on its SQLite file (`kafka.db` in the cluster directory) through
/// Python's `sqlite3`, which the broker reads anew on every request.
impl Broker {
    /// Retention: deletes `topic` partition `partition`'s records below
    /// `offset`, as Kafka's log cleaner does (the earliest offset becomes
    /// `offset`; keep at least one record).
    pub fn delete_records_below(
        &self,
        cluster: &Cluster,
        topic: &str,
        partition: i32,
        offset: i64,
    ) {
        self.sql(
            cluster,
            &format!(
                "DELETE FROM record WHERE topition = ({TOPITION}) AND offset_id < :offset;\n\
                 UPDATE watermark SET low = :offset WHERE topition = ({TOPITION});"
            ),
            &[
                ("topic", topic.into()),
                ("partition", partition.into()),
                ("offset", offset.into()),
            ],
        );
    }

    /// Adds partition `partition` (the next one) to `topic`, as Kafka's
    /// CreatePartitions would.
    pub fn add_partition(&self, cluster: &Cluster, topic: &str, partition: i32) {
        self.sql(
            cluster,
            &format!(
                "UPDATE topic SET partitions = :partition + 1 WHERE name = :topic \
                   AND partitions = :partition AND cluster = ({CLUSTER});\n\
                 INSERT INTO topition (topic, partition) SELECT t.id, :partition FROM topic t \
                   WHERE t.name = :topic AND t.cluster = ({CLUSTER});\n\
                 INSERT INTO watermark (topition) SELECT ({TOPITION});"
            ),
            &[("topic", topic.into()), ("partition", partition.into())],
        );
    }

    /// Deletes `topic` and its records (the broker's own DeleteTopics
    /// deletes every topic).
    pub fn drop_topic(&self, cluster: &Cluster, topic: &str) {
        self.sql(
            cluster,
            &format!("DELETE FROM topic WHERE name = :topic AND cluster = ({CLUSTER});"),
            &[("topic", topic.into())],
        );
    }

    /// Runs `statements` (one a line) in one transaction with `params`.
    fn sql(&self, cluster: &Cluster, statements: &str, params: &[(&str, serde_json::Value)]) {
        let params: serde_json::Map<String, serde_json::Value> = params
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        let script = r#"
import json, sqlite3, sys
db = sqlite3.connect(sys.argv[1], timeout=10, isolation_level=None)
db.execute("PRAGMA foreign_keys = ON")
params = json.loads(sys.argv[3])
db.execute("BEGIN IMMEDIATE")
for statement in sys.argv[2].split(chr(10)):
    db.execute(statement, params)
db.execute("COMMIT")
"#;
        let out = std::process::Command::new("python3")
            .arg("-c")
            .arg(script)
            .arg(cluster.root().join("kafka.db"))
            .arg(statements)
            .arg(serde_json::Value::Object(params).to_string())
            .output()
            .expect("run python3");
        assert!(
            out.status.success(),
            "SQL on the broker's storage failed: {}\n{statements}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The broker's cluster row.
const CLUSTER: &str = "SELECT id FROM cluster WHERE name = 'tansu_cluster'";
/// A topic partition's row, from `:topic` and `:partition`.
const TOPITION: &str = "SELECT tp.id FROM topition tp JOIN topic t ON t.id = tp.topic \
     WHERE t.name = :topic AND tp.partition = :partition \
     AND t.cluster = (SELECT id FROM cluster WHERE name = 'tansu_cluster')";

/// The JSON value of test record `n`: `{"value": n, "city": ...}`.
pub fn record(n: u64) -> Vec<u8> {
    let city = ["Lisbon", "Oslo", "Quito", "Accra"][(n % 4) as usize];
    format!(r#"{{"value":{n},"city":"{city}"}}"#).into_bytes()
}

/// The records `values` (see [`record`]) as the table `input` a query
/// reads them into: `value` and `city`, for an oracle.
pub fn records_table(values: std::ops::Range<u64>) -> arrow_array::RecordBatch {
    use std::sync::Arc;
    let cities: Vec<String> = values
        .clone()
        .map(|n| {
            let v: serde_json::Value = serde_json::from_slice(&record(n)).expect("a record");
            v["city"].as_str().expect("a city").to_string()
        })
        .collect();
    let schema = Arc::new(arrow_schema::Schema::new(vec![
        arrow_schema::Field::new("value", arrow_schema::DataType::Int64, true),
        arrow_schema::Field::new("city", arrow_schema::DataType::Utf8, true),
    ]));
    let values: Vec<i64> = values.map(|n| n as i64).collect();
    arrow_array::RecordBatch::try_new(
        schema,
        vec![
            Arc::new(arrow_array::Int64Array::from(values)),
            Arc::new(arrow_array::StringArray::from(cities)),
        ],
    )
    .expect("a batch of records")
}

/// The schema line of a spec for [`record`].
pub const SCHEMA: &str = "[{name: value, type: bigint}, {name: city, type: string}]";

/// Produces the records `values` to `topic`, value `n` to partition
/// `n % partitions`, in chunks; returns how many went to each partition.
pub async fn produce(
    kafka: &Kafka,
    topic: &str,
    partitions: i32,
    values: std::ops::Range<u64>,
) -> Vec<u64> {
    let mut counts = vec![0u64; partitions as usize];
    for p in 0..partitions {
        let mine: Vec<u64> = values
            .clone()
            .filter(|n| n % partitions as u64 == p as u64)
            .collect();
        for chunk in mine.chunks(500) {
            let records = chunk
                .iter()
                .map(|&n| (Some(n.to_string().into_bytes()), record(n)));
            send(kafka, topic, p, records).await;
        }
        counts[p as usize] += mine.len() as u64;
    }
    counts
}

/// Produces `0..total` to the `partitions` partitions of `topic` in the
/// background, `chunk` records every 100 ms, with the broker's own client.
pub fn produce_while(
    broker: &Broker,
    topic: &'static str,
    partitions: i32,
    total: u64,
    chunk: u64,
) -> tokio::task::JoinHandle<()> {
    let servers = broker.servers();
    let (security, secrets) = (broker.security().clone(), broker.secrets().clone());
    tokio::spawn(async move {
        let deadline = Duration::from_secs(10);
        let k = Kafka::connect_secure(&servers, &security, &secrets, "broker", deadline)
            .await
            .expect("producer connects");
        for start in (0..total).step_by(chunk as usize) {
            produce(&k, topic, partitions, start..(start + chunk).min(total)).await;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
}

/// Produces raw values to one partition.
pub async fn produce_raw(kafka: &Kafka, topic: &str, partition: i32, values: &[&[u8]]) {
    send(
        kafka,
        topic,
        partition,
        values.iter().map(|v| (None, v.to_vec())),
    )
    .await;
}

/// Produces `(key, value)` records to one partition, stamped now.
async fn send(
    kafka: &Kafka,
    topic: &str,
    partition: i32,
    records: impl Iterator<Item = (Option<Vec<u8>>, Vec<u8>)>,
) {
    let client = kafka
        .partition(topic, partition, true)
        .await
        .unwrap_or_else(|e| panic!("partition {partition}: {e}"));
    let now = sluice_common::time::now_ms();
    let records = records
        .map(|(key, value)| NewRecord {
            key,
            value,
            timestamp_ms: now,
        })
        .collect();
    client
        .produce(records)
        .await
        .unwrap_or_else(|e| panic!("produce to {topic}/{partition}: {e}"));
}

/// A spec reading `topic` at `servers` as JSON [`record`]s into a jsonl
/// sink; `extra` lines go under `source.kafka`.
pub fn spec(name: &str, servers: &str, topic: &str, sink: &Path, extra: &str) -> String {
    let extra: String = extra
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| format!("    {}\n", l.trim()))
        .collect();
    format!(
        "name: {name}\nsource:\n  kafka:\n    bootstrap_servers: {servers}\n    topic: {topic}\n    schema: {SCHEMA}\n{extra}trigger:\n  interval_ms: 100\nsink:\n  files:\n    path: {}\n    format: jsonl\n",
        sink.display()
    )
}

/// A broker with one topic, a standalone driver, one executor and a
/// client: what most Kafka tests start from. Dropped, it stops them all.
pub struct KafkaCluster {
    pub broker: Broker,
    pub driver: Driver,
    pub executor: Executor,
    pub client: Client,
    /// A client of the broker.
    pub kafka: Kafka,
    pub cluster: Cluster,
}

impl KafkaCluster {
    /// Starts it all in a cluster named `test`, with `topic` of
    /// `partitions` partitions.
    pub async fn start(test: &str, topic: &str, partitions: i32) -> KafkaCluster {
        let cluster = Cluster::new(test);
        let broker = Broker::start(&cluster).await;
        broker.create_topic(topic, partitions).await;
        let kafka = broker.client().await;
        let driver = cluster.start_ready_driver().await;
        let executor = cluster.start_executor(driver.addr());
        let client = cluster.client(driver.addr());
        KafkaCluster {
            broker,
            driver,
            executor,
            client,
            kafka,
            cluster,
        }
    }

    /// A spec of [`spec`] for `topic` on this broker, with its sink.
    pub fn spec(&self, name: &str, topic: &str, extra: &str) -> (String, PathBuf) {
        let sink = self.cluster.sink_path(name);
        (
            spec(name, &self.broker.servers(), topic, &sink, extra),
            sink,
        )
    }
}

/// Waits until `query`'s latest progress shows its partitions as `done`
/// wants them; panics at once if the query leaves RUNNING.
pub async fn wait_read(
    client: &mut Client,
    query: &str,
    what: &str,
    done: impl Fn(&[PartitionProgress]) -> bool,
) -> QueryStatus {
    client
        .wait_for(query, what, WAIT, |s| {
            assert_eq!(s.state, QueryState::Running as i32, "{s:#?}");
            s.latest_progress
                .as_ref()
                .is_some_and(|p| done(&p.partitions))
        })
        .await
}

/// Waits until `query` has read its partitions to end offsets that add up
/// to `ends`.
pub async fn wait_ends(client: &mut Client, query: &str, ends: i64) -> QueryStatus {
    let what = format!("read to offsets adding up to {ends}");
    wait_read(client, query, &what, |p| {
        p.iter().map(|p| p.end_offset).sum::<i64>() >= ends
    })
    .await
}

/// Every row of a jsonl sink's files.
pub fn sink_rows(sink: &Path) -> Vec<serde_json::Value> {
    crate::files_under(sink)
        .into_iter()
        .filter(|f| f.extension().is_some_and(|e| e == "jsonl"))
        .flat_map(|f| {
            let text = std::fs::read_to_string(&f).expect("read a sink file");
            text.lines()
                .map(|l| serde_json::from_str(l).expect("a sink row is JSON"))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Every `value` of a jsonl sink, sorted.
pub fn sink_values(sink: &Path) -> Vec<u64> {
    let mut values: Vec<u64> = sink_rows(sink)
        .iter()
        .map(|r| r["value"].as_u64().expect("a row has a value"))
        .collect();
    values.sort_unstable();
    values
}

/// A transaction of test records ([`record`]) to one partition, written by
/// confluent-kafka in a process of its own: open (its records written and
/// flushed) until [`Transaction::end`] commits or aborts it. Dropped, the
/// process is killed and the broker aborts the transaction at its timeout.
pub struct Transaction {
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    lines: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
}

/// The producer's side of [`Transaction`].
const TRANSACTION_PY: &str = r#"
import json, sys
from confluent_kafka import Producer
servers, topic, partition, txn_id, first, last = sys.argv[1:7]
p = Producer({"bootstrap.servers": servers, "transactional.id": txn_id})
p.init_transactions(30)
p.begin_transaction()
for n in range(int(first), int(last)):
    city = ["Lisbon", "Oslo", "Quito", "Accra"][n % 4]
    value = json.dumps({"value": n, "city": city}, separators=(",", ":"))
    p.produce(topic, key=str(n), value=value, partition=int(partition))
p.flush(30)
print("open", flush=True)
end = sys.stdin.readline().strip()
if end == "commit":
    p.commit_transaction(30)
else:
    p.abort_transaction(30)
print(end, flush=True)
"#;

impl Transaction {
    /// Opens transaction `txn_id` on `servers` and writes the records
    /// `values` to `topic` partition `partition`; returns once they are
    /// written and the transaction is still open.
    pub async fn open(
        servers: &str,
        topic: &str,
        partition: i32,
        txn_id: &str,
        values: std::ops::Range<u64>,
    ) -> Transaction {
        use tokio::io::AsyncBufReadExt;
        let mut child = tokio::process::Command::new(kafka_venv().join("bin/python"))
            .arg("-c")
            .arg(TRANSACTION_PY)
            .args([servers, topic, &partition.to_string(), txn_id])
            .args([values.start.to_string(), values.end.to_string()])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start the transactional producer (scripts/deps.sh test installs it)");
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut t = Transaction {
            child,
            stdin,
            lines: tokio::io::BufReader::new(stdout).lines(),
        };
        t.expect("open").await;
        t
    }

    /// Commits (`true`) or aborts the transaction, and waits until the
    /// broker has.
    pub async fn end(mut self, commit: bool) {
        use tokio::io::AsyncWriteExt;
        let word = if commit { "commit" } else { "abort" };
        self.stdin
            .write_all(format!("{word}\n").as_bytes())
            .await
            .expect("write to the transactional producer");
        self.expect(word).await;
        let status = self.child.wait().await.expect("wait for the producer");
        assert!(status.success(), "the transactional producer: {status}");
    }

    async fn expect(&mut self, word: &str) {
        let line = tokio::time::timeout(WAIT, self.lines.next_line())
            .await
            .unwrap_or_else(|_| panic!("the transactional producer did not {word} in {WAIT:?}"))
            .expect("read the transactional producer");
        assert_eq!(
            line.as_deref(),
            Some(word),
            "the transactional producer (its errors are on stderr)"
        );
    }
}

/// Every record of `topic` a `read_committed` reader sees now, partition by
/// partition, with the partition it was in.
pub async fn topic_records(kafka: &Kafka, topic: &str) -> Vec<(i32, KafkaRecord)> {
    let topics = kafka.topics().await.expect("list topics");
    let partitions = topics
        .get(topic)
        .unwrap_or_else(|| panic!("topic {topic:?} exists"));
    let mut out = Vec::new();
    for &p in partitions {
        let partition = kafka.partition(topic, p, true).await.expect("partition");
        let (mut at, end) = (
            partition.earliest().await.expect("earliest"),
            partition.latest().await.expect("last stable offset"),
        );
        let deadline = Instant::now() + WAIT;
        while at < end {
            assert!(
                Instant::now() < deadline,
                "{topic}/{p}: stuck at {at} of {end}"
            );
            let fetched = partition
                .fetch(at, 1 << 20, Duration::from_millis(200))
                .await
                .expect("fetch");
            out.extend(fetched.records.into_iter().map(|r| (p, r)));
            at = fetched.next;
        }
        partition.close().await.expect("close the reader");
    }
    out
}
