//! The Kafka source on a broker with transactions (noida-db), written to by
//! an independent transactional producer (confluent-kafka): the source
//! reads `read_committed`, so the records of an aborted transaction are
//! never read, and a batch plans no further than the oldest transaction
//! still open (the last stable offset). The records behind it, committed
//! ones included, are read once it commits, each once.

use std::time::Duration;

use sluice_tests::cluster::Cluster;
use sluice_tests::kafka::{self, Broker, Transaction, sink_values, spec, wait_read};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_committed_records_are_read_each_once() {
    let cluster = Cluster::new("kafka-transactions");
    let broker = Broker::start_transactional(&cluster).await;
    broker.create_topic("tx", 1).await;
    let servers = broker.servers();
    let kafka = broker.client().await;
    let partition = kafka.partition("tx", 0, true).await.expect("partition");

    Transaction::open(&servers, "tx", 0, "first", 0..10)
        .await
        .end(true)
        .await;
    Transaction::open(&servers, "tx", 0, "aborted", 100..110)
        .await
        .end(false)
        .await;
    Transaction::open(&servers, "tx", 0, "second", 10..20)
        .await
        .end(true)
        .await;
    // A transaction left open, then records written after it without one.
    let open = Transaction::open(&servers, "tx", 0, "open", 20..30).await;
    kafka::produce(&kafka, "tx", 1, 30..40).await;
    let stable = partition.latest().await.expect("last stable offset");

    let driver = cluster.start_ready_driver().await;
    let _executor = cluster.start_executor(driver.addr());
    let mut client = cluster.client(driver.addr());
    let sink = cluster.sink_path("tx");
    client
        .submit(&spec("tx", &servers, "tx", &sink, ""))
        .await
        .expect("submit");

    let what = format!("read up to the open transaction at offset {stable}");
    wait_read(&mut client, "tx", &what, |p| {
        p.iter().any(|p| p.end_offset == stable)
    })
    .await;
    // Several triggers later, nothing past the open transaction was read.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let status = client.get("tx").await.expect("status");
    let progress = status.latest_progress.expect("progress");
    assert_eq!(progress.partitions[0].end_offset, stable, "{progress:#?}");
    assert_eq!(sink_values(&sink), (0..20).collect::<Vec<u64>>());

    open.end(true).await;
    let end = partition.latest().await.expect("latest offset");
    assert!(end > stable, "the commit moved the last stable offset");
    wait_read(
        &mut client,
        "tx",
        "read past the committed transaction",
        |p| p.iter().any(|p| p.end_offset == end),
    )
    .await;
    client.stop("tx").await.expect("stop");
    assert_eq!(sink_values(&sink), (0..40).collect::<Vec<u64>>());
}

/// `isolation: read_uncommitted` reads every record, those of an aborted
/// transaction and of one still open too, up to the high watermark.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_uncommitted_reads_every_record() {
    let cluster = Cluster::new("kafka-uncommitted");
    let broker = Broker::start_transactional(&cluster).await;
    broker.create_topic("tx", 1).await;
    let servers = broker.servers();
    let kafka = broker.client().await;
    Transaction::open(&servers, "tx", 0, "first", 0..10)
        .await
        .end(true)
        .await;
    Transaction::open(&servers, "tx", 0, "aborted", 100..110)
        .await
        .end(false)
        .await;
    let _open = Transaction::open(&servers, "tx", 0, "open", 20..30).await;
    kafka::produce(&kafka, "tx", 1, 30..40).await;

    let driver = cluster.start_ready_driver().await;
    let _executor = cluster.start_executor(driver.addr());
    let mut client = cluster.client(driver.addr());
    let sink = cluster.sink_path("tx");
    let text = spec("tx", &servers, "tx", &sink, "isolation: read_uncommitted");
    client.submit(&text).await.expect("submit");
    let mut expected: Vec<u64> = (0..10).chain(100..110).chain(20..40).collect();
    expected.sort_unstable();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while sink_values(&sink).len() < expected.len() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    client.stop("tx").await.expect("stop");
    assert_eq!(sink_values(&sink), expected);
}

/// The sink's two phases on noida-db: a task's writer leaves its
/// transaction open and reports it; the driver's `EndTxn`, from another
/// connection, commits it (and again, idempotently); a newer writer of the
/// same transactional id fences the older one, whose transaction is then
/// never visible.
mod sink {
    use std::time::{Duration, Instant};

    use sluice_common::secrets::Secrets;
    use sluice_common::spec::KafkaSecurity;
    use sluice_kafka::{Delivery, Kafka, TxnEnd, TxnId, Writer, end_transaction};
    use sluice_tests::cluster::Cluster;
    use sluice_tests::kafka::{Broker, record};

    const DEADLINE: Duration = Duration::from_secs(5);

    fn exactly_once(id: &str) -> Delivery {
        Delivery::ExactlyOnce {
            transactional_id: id.to_string(),
            timeout: Duration::from_secs(60),
        }
    }

    /// Writes the test records `values`, keyless, round-robin over
    /// `partitions`.
    async fn write(writer: &mut Writer, values: std::ops::Range<u64>, partitions: i32) {
        let now = sluice_common::time::now_ms();
        for n in values {
            let p = (n % partitions as u64) as i32;
            writer
                .send(Some(p), None, record(n), Some(now))
                .await
                .expect("send");
        }
    }

    /// A record as read: its partition, key and value.
    type Read = (i32, Option<Vec<u8>>, Vec<u8>);

    /// Every record of `topic` a `read_committed` reader sees now.
    async fn read(kafka: &Kafka, topic: &str) -> Vec<Read> {
        let mut out = Vec::new();
        for p in 0..kafka.partition_count(topic).await.expect("partitions") {
            let partition = kafka.partition(topic, p, true).await.expect("partition");
            let (mut at, end) = (
                partition.earliest().await.expect("earliest"),
                partition.latest().await.expect("last stable offset"),
            );
            let deadline = Instant::now() + Duration::from_secs(10);
            while at < end {
                assert!(Instant::now() < deadline, "{topic}/{p}: at {at} of {end}");
                let fetched = partition
                    .fetch(at, 1 << 20, Duration::from_millis(100))
                    .await
                    .expect("fetch");
                for r in fetched.records {
                    out.push((p, r.key, r.value.expect("a value")));
                }
                at = fetched.next;
            }
            partition.close().await.expect("close the reader");
        }
        out
    }

    /// The `value`s of test records, sorted.
    fn values(records: &[Read]) -> Vec<u64> {
        let mut v: Vec<u64> = records
            .iter()
            .map(|(_, _, value)| {
                let row: serde_json::Value = serde_json::from_slice(value).expect("JSON");
                row["value"].as_u64().expect("a value")
            })
            .collect();
        v.sort_unstable();
        v
    }

    async fn end(servers: &str, txn: &TxnId) -> TxnEnd {
        end_transaction(
            servers,
            &KafkaSecurity::default(),
            &Secrets::default(),
            txn,
            true,
            DEADLINE,
        )
        .await
        .unwrap_or_else(|e| panic!("commit {txn}: {e}"))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_prepared_transaction_is_committed_by_another_connection() {
        let cluster = Cluster::new("kafka-txn-commit");
        let broker = Broker::start_transactional(&cluster).await;
        broker.create_topic("out", 2).await;
        let servers = broker.servers();
        let kafka = broker.client().await;
        assert_eq!(kafka.partition_count("out").await.unwrap(), 2);

        // In a task of its own, as an executor runs it.
        let writer = kafka.writer("out", exactly_once("q/0")).await.unwrap();
        let task = tokio::spawn(async move {
            let mut writer = writer;
            write(&mut writer, 0..10, 2).await;
            assert_eq!(writer.records(), 10);
            assert_eq!(
                writer.bytes(),
                (0..10).map(|n| record(n).len() as u64).sum::<u64>()
            );
            writer.finish().await
        });
        let txn = task.await.unwrap().unwrap().expect("an open transaction");
        assert_eq!(txn.transactional_id, "q/0");
        assert!(txn.producer_id >= 0 && txn.producer_epoch >= 0, "{txn}");
        assert!(
            read(&kafka, "out").await.is_empty(),
            "nothing is committed yet"
        );

        // The driver's side: another process, another connection.
        let (to, prepared) = (servers.clone(), txn.clone());
        let commit = tokio::spawn(async move { end(&to, &prepared).await });
        assert_eq!(commit.await.unwrap(), TxnEnd::Ended);
        let records = read(&kafka, "out").await;
        assert_eq!(values(&records), (0..10).collect::<Vec<_>>());
        assert!(records.iter().all(|(p, key, value)| {
            key.is_none()
                && serde_json::from_slice::<serde_json::Value>(value).unwrap()["value"]
                    .as_u64()
                    .is_some_and(|n| n % 2 == *p as u64)
        }));
        // A driver that restarted sends it again: the same answer, and the
        // records are still there once each.
        assert_eq!(end(&servers, &txn).await, TxnEnd::Ended);
        assert_eq!(
            values(&read(&kafka, "out").await),
            (0..10).collect::<Vec<_>>()
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_new_writer_fences_the_old_transaction() {
        let cluster = Cluster::new("kafka-txn-fence");
        let broker = Broker::start_transactional(&cluster).await;
        broker.create_topic("out", 1).await;
        let servers = broker.servers();
        let kafka = broker.client().await;

        let mut old = kafka.writer("out", exactly_once("q/1")).await.unwrap();
        write(&mut old, 0..5, 1).await;
        let old = old.finish().await.unwrap().expect("a transaction");
        // The task again (a retried attempt): its writer fences the first.
        let mut new = kafka.writer("out", exactly_once("q/1")).await.unwrap();
        write(&mut new, 100..105, 1).await;
        let new = new.finish().await.unwrap().expect("a transaction");
        assert_eq!(new.producer_id, old.producer_id, "{old} {new}");
        assert!(new.producer_epoch > old.producer_epoch, "{old} {new}");

        let TxnEnd::Fenced { code } = end(&servers, &old).await else {
            panic!("{old} was fenced by {new}");
        };
        assert!([47, 90].contains(&code), "{code}");
        assert_eq!(end(&servers, &new).await, TxnEnd::Ended);
        assert_eq!(
            values(&read(&kafka, "out").await),
            (100..105).collect::<Vec<_>>()
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_aborted_writer_leaves_nothing_and_an_empty_one_no_transaction() {
        let cluster = Cluster::new("kafka-txn-abort");
        let broker = Broker::start_transactional(&cluster).await;
        broker.create_topic("out", 1).await;
        let servers = broker.servers();
        let kafka = broker.client().await;

        let mut failed = kafka.writer("out", exactly_once("q/2")).await.unwrap();
        write(&mut failed, 0..5, 1).await;
        // A record the topic has no partition for fails, and names it.
        let err = failed
            .send(Some(7), None, record(5), None)
            .await
            .unwrap_err();
        assert!(!err.is_retryable(), "{err}");
        let text = err.to_string();
        assert!(text.contains("\"out\"") && text.contains("q/2"), "{text}");
        failed.abort().await.expect("abort");
        let empty = kafka.writer("out", exactly_once("q/2")).await.unwrap();
        assert_eq!(empty.finish().await.expect("finish"), None);
        let mut last = kafka.writer("out", exactly_once("q/2")).await.unwrap();
        write(&mut last, 10..12, 1).await;
        let txn = last.finish().await.unwrap().expect("a transaction");
        assert_eq!(end(&servers, &txn).await, TxnEnd::Ended);
        assert_eq!(values(&read(&kafka, "out").await), vec![10, 11]);

        let err = kafka.partition_count("missing").await.unwrap_err();
        assert!(!err.is_retryable(), "{err}");
        assert!(err.to_string().contains("\"missing\""), "{err}");
    }

    /// Java's `Utils.murmur2`, written here from the algorithm,
    /// independent of the client's.
    fn murmur2(key: &[u8]) -> i32 {
        const M: u32 = 0x5bd1_e995;
        let mut h: u32 = 0x9747_b28c ^ key.len() as u32;
        let chunks = key.chunks_exact(4);
        let tail = chunks.remainder();
        for c in chunks {
            let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            k = k.wrapping_mul(M);
            k ^= k >> 24;
            h = h.wrapping_mul(M) ^ k.wrapping_mul(M);
        }
        for (i, b) in tail.iter().enumerate() {
            h ^= (*b as u32) << (8 * i);
        }
        if !tail.is_empty() {
            h = h.wrapping_mul(M);
        }
        h ^= h >> 13;
        h = h.wrapping_mul(M);
        h ^= h >> 15;
        h as i32
    }

    /// Kafka's default partitioner for a keyed record: murmur2, masked
    /// positive, modulo the partitions.
    fn partition_of(key: &[u8], partitions: i32) -> i32 {
        (murmur2(key) & 0x7fff_ffff) % partitions
    }

    #[test]
    fn the_murmur2_oracle_matches_kafka() {
        // Apache Kafka's UtilsTest.testMurmur2.
        for (key, hash) in [
            ("21", -973932308),
            ("foobar", -790332482),
            ("a-little-bit-long-string", -985981536),
            ("a-little-bit-longer-string", -1486304829),
            (
                "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
                -58897971,
            ),
            ("abc", 479470107),
        ] {
            assert_eq!(murmur2(key.as_bytes()), hash, "{key}");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn at_least_once_writes_to_tansu() {
        let cluster = Cluster::new("kafka-at-least-once");
        let broker = Broker::start(&cluster).await;
        broker.create_topic("out", 3).await;
        let kafka = broker.client().await;
        let mut writer = kafka.writer("out", Delivery::AtLeastOnce).await.unwrap();
        for n in 0..30u64 {
            let key = format!("key-{n}").into_bytes();
            writer
                .send(None, Some(key), record(n), None)
                .await
                .expect("send");
        }
        assert_eq!(writer.finish().await.unwrap(), None);

        let records = read(&kafka, "out").await;
        assert_eq!(values(&records), (0..30).collect::<Vec<_>>());
        for (p, key, _) in &records {
            let key = key.as_deref().expect("a key");
            assert_eq!(*p, partition_of(key, 3), "{}", String::from_utf8_lossy(key));
        }
        let partitions: std::collections::BTreeSet<i32> =
            records.iter().map(|(p, _, _)| *p).collect();
        assert_eq!(partitions.len(), 3, "30 keys spread over the partitions");
    }
}
