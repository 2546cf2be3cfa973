//! TLS and SASL to Kafka against tansu 0.6.0, with Sluice's client
//! (`Kafka::connect_secure`: krafka's admin calls, producers and consumers)
//! and the driver's raw `EndTxn` connection (`end_transaction`).
//!
//! tansu 0.6.0 has SCRAM-SHA-256 and SCRAM-SHA-512 (`--authentication`,
//! users from `tansu user create`), no PLAIN, and no TLS of its own: TLS
//! here is a terminator in front of it (`sluice_tests::kafka_tls`), so the
//! clients' handshakes and certificate checks are real. A refused
//! certificate or login must be an error that is not retried, comes at
//! once (not at the deadline), names the servers, the user and the
//! mechanism, and never holds the password.

use std::time::{Duration, Instant};

use sluice_common::spec::{KafkaSecurity, SaslMechanism};
use sluice_kafka::{Delivery, Kafka, TxnId, end_transaction};
use sluice_tests::cluster::Cluster;
use sluice_tests::kafka::{Broker, KafkaPki, ScramUser, login, secrets_dir, topic_records};

const FIELD: &str = "sink.kafka.security";
const DEADLINE: Duration = Duration::from_secs(10);

/// A SCRAM-SHA-256 user and a SCRAM-SHA-512 one.
fn users() -> Vec<ScramUser> {
    vec![
        ScramUser::new("alice", "alice-pw-256", SaslMechanism::ScramSha256),
        ScramUser::new("bob", "bob-pw-512", SaslMechanism::ScramSha512),
    ]
}

/// The TLS settings of `broker`, without its login.
fn tls_of(broker: &Broker) -> KafkaSecurity {
    let s = broker.security();
    KafkaSecurity {
        protocol: match s.protocol.tls() {
            true => sluice_common::spec::SecurityProtocol::Ssl,
            false => sluice_common::spec::SecurityProtocol::Plaintext,
        },
        ssl_ca: s.ssl_ca.clone(),
        ssl_certificate: s.ssl_certificate.clone(),
        ssl_key: s.ssl_key.clone(),
        ..KafkaSecurity::default()
    }
}

/// A transaction that no broker here has: `end_transaction` must get as
/// far as the broker's answer.
fn txn() -> TxnId {
    TxnId {
        transactional_id: "q-1/sink-0".into(),
        producer_id: 4000,
        producer_epoch: 0,
    }
}

/// Checks that `err` is a refusal: not retryable, in less than half the
/// deadline, naming `servers`, without `secrets`; returns its text.
fn refusal(err: sluice_kafka::Error, started: Instant, servers: &str, secrets: &[&str]) -> String {
    let text = err.to_string();
    assert!(!err.is_retryable(), "not retryable: {text}");
    assert!(
        started.elapsed() < DEADLINE / 2,
        "refused at once, not at the deadline: {text}"
    );
    assert!(text.contains(servers), "names the servers: {text}");
    for secret in secrets {
        assert!(!text.contains(secret), "holds a password: {text}");
    }
    text
}

/// Connecting to `broker` with `security` is refused ([`refusal`]).
async fn connect_refused(broker: &Broker, security: &KafkaSecurity, secrets: &[&str]) -> String {
    let (servers, allowed) = (&broker.servers(), broker.secrets());
    let started = Instant::now();
    let err = Kafka::connect_secure(servers, security, allowed, FIELD, DEADLINE)
        .await
        .err()
        .expect("the connection is refused");
    refusal(err, started, servers, secrets)
}

/// A client of `broker` with the broker's own security settings.
async fn connect(broker: &Broker) -> Kafka {
    Kafka::connect_secure(
        &broker.servers(),
        broker.security(),
        broker.secrets(),
        FIELD,
        DEADLINE,
    )
    .await
    .unwrap()
}

/// `end_transaction` on `broker` with `security` fails without retrying;
/// its text.
async fn end_refused(broker: &Broker, security: &KafkaSecurity, secrets: &[&str]) -> String {
    let (servers, allowed) = (&broker.servers(), broker.secrets());
    let started = Instant::now();
    let err = end_transaction(servers, security, allowed, &txn(), true, DEADLINE)
        .await
        .expect_err("tansu has no EndTxn");
    refusal(err, started, servers, secrets)
}

/// Writes `n` records into a new topic with an at-least-once writer, then
/// reads them back, through `kafka`.
async fn write_and_read(kafka: &Kafka, topic: &str, n: u64) {
    kafka.create_topic(topic, 1).await.unwrap();
    kafka.partition(topic, 0, true).await.unwrap();
    let mut writer = kafka.writer(topic, Delivery::AtLeastOnce).await.unwrap();
    for i in 0..n {
        let value = format!("{topic}-{i}").into_bytes();
        writer.send(Some(0), None, value, None).await.unwrap();
    }
    assert_eq!(writer.finish().await.unwrap(), None);
    let read: Vec<String> = topic_records(kafka, topic)
        .await
        .into_iter()
        .map(|(_, r)| String::from_utf8(r.value.expect("a value")).unwrap())
        .collect();
    let wrote: Vec<String> = (0..n).map(|i| format!("{topic}-{i}")).collect();
    assert_eq!(read, wrote);
    assert!(kafka.topics().await.unwrap().contains_key(topic));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_the_ca_lists_writes_and_reads() {
    let cluster = Cluster::new("kafka-tls");
    let pki = KafkaPki::new(secrets_dir(&cluster).join("pki"));
    let broker = Broker::start_secured(&cluster, &[], Some(&pki), false).await;
    let servers = broker.servers();
    let kafka = connect(&broker).await;
    assert_eq!(kafka.security(), broker.security());
    write_and_read(&kafka, "over-tls", 25).await;

    // Another CA: krafka's connection and the raw one refuse the broker.
    let other = KafkaSecurity {
        ssl_ca: Some(pki.file("other-ca.pem")),
        ..broker.security().clone()
    };
    let expected = format!(
        "the broker's certificate is not signed by ssl_ca {} (sink.kafka.security.ssl_ca); \
         not retried",
        pki.file("other-ca.pem")
    );
    let text = connect_refused(&broker, &other, &[]).await;
    assert!(text.contains(&expected), "{text}");
    let text = end_refused(&broker, &other, &[]).await;
    assert!(text.contains(&expected), "{text}");

    // No CA: the system's roots, which do not hold the test CA (or, on a
    // machine without CA certificates, an error naming ssl_ca).
    let system = KafkaSecurity {
        ssl_ca: None,
        ..broker.security().clone()
    };
    let err = Kafka::connect_secure(&servers, &system, broker.secrets(), FIELD, DEADLINE)
        .await
        .err()
        .expect("the test CA is not the system's");
    assert!(!err.is_retryable(), "{err}");
    assert!(
        err.to_string().contains("sink.kafka.security.ssl_ca"),
        "{err}"
    );

    // A CA file that is not there, or that is outside the secrets
    // directory: the setting is named, nothing is tried.
    for (ca, why) in [
        ("pki/no-such-ca.pem", "pki/no-such-ca.pem cannot be read"),
        (
            "/no/such/ca.pem",
            "/no/such/ca.pem is outside --secrets-dir",
        ),
    ] {
        let missing = KafkaSecurity {
            ssl_ca: Some(ca.into()),
            ..broker.security().clone()
        };
        for err in [
            Kafka::connect_secure(&servers, &missing, broker.secrets(), FIELD, DEADLINE)
                .await
                .err()
                .unwrap(),
            end_transaction(&servers, &missing, broker.secrets(), &txn(), true, DEADLINE)
                .await
                .unwrap_err(),
        ] {
            assert!(!err.is_retryable(), "{err}");
            let text = err.to_string();
            assert!(
                text.contains("sink.kafka.security.ssl_ca") && text.contains(why),
                "{text}"
            );
        }
    }

    // The raw connection completes its handshake and reaches the broker,
    // which has no transactions.
    let text = end_refused(&broker, broker.security(), &[]).await;
    assert!(
        text.contains("the broker does not support EndTxn"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_presents_the_client_certificate() {
    let cluster = Cluster::new("kafka-mtls");
    let pki = KafkaPki::new(secrets_dir(&cluster).join("pki"));
    let broker = Broker::start_secured(&cluster, &[], Some(&pki), true).await;
    assert!(broker.security().ssl_certificate.is_some());
    let kafka = connect(&broker).await;
    write_and_read(&kafka, "over-mtls", 5).await;
    let text = end_refused(&broker, broker.security(), &[]).await;
    assert!(
        text.contains("the broker does not support EndTxn"),
        "{text}"
    );

    // Without a client certificate the broker refuses the connection.
    let anonymous = KafkaSecurity {
        ssl_certificate: None,
        ssl_key: None,
        ..broker.security().clone()
    };
    let expected = "asks for a client certificate; set sink.kafka.security.ssl_certificate";
    let text = connect_refused(&broker, &anonymous, &[]).await;
    assert!(text.contains(expected), "{text}");
    let text = end_refused(&broker, &anonymous, &[]).await;
    assert!(text.contains(expected), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scram_sha_256_and_512_users_write_and_read() {
    let cluster = Cluster::new("kafka-scram");
    let users = users();
    let broker = Broker::start_secured(&cluster, &users, None, false).await;
    let servers = broker.servers();
    for user in &users {
        let security = login(
            &cluster,
            &KafkaSecurity::default(),
            &user.name,
            &user.password,
            user.mechanism,
        );
        let kafka = Kafka::connect_secure(&servers, &security, broker.secrets(), FIELD, DEADLINE)
            .await
            .unwrap_or_else(|e| panic!("{} logs in: {e}", user.name));
        write_and_read(&kafka, &format!("by-{}", user.name), 30).await;
        // The raw connection logs in too (the broker's SCRAM signature is
        // checked) and reaches the broker's answer.
        let text = end_refused(&broker, &security, &[&user.password]).await;
        assert!(
            text.contains("the broker does not support EndTxn"),
            "{text}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_login_names_user_and_mechanism_and_no_password() {
    let cluster = Cluster::new("kafka-scram-refused");
    let users = users();
    let broker = Broker::start_secured(&cluster, &users, None, false).await;
    let servers = broker.servers();
    let plaintext = KafkaSecurity::default();
    let secrets = ["alice-pw-256", "bob-pw-512", "wrong-pw"];
    let as_ = |user: &str, password: &str, mechanism| {
        login(&cluster, &plaintext, user, password, mechanism)
    };
    let bob_wrong = as_("bob", "wrong-pw", SaslMechanism::ScramSha512);
    let source = format!(
        "the password in the file {} (sink.kafka.security.sasl_password_file)",
        bob_wrong.sasl_password_file.as_deref().unwrap()
    );
    for (who, security, why) in [
        ("bob", bob_wrong.clone(), "wrong password"),
        (
            "carol",
            as_("carol", "wrong-pw", SaslMechanism::ScramSha512),
            "unknown user",
        ),
        (
            "alice",
            as_("alice", "alice-pw-256", SaslMechanism::ScramSha512),
            "no SCRAM-SHA-512 credential",
        ),
    ] {
        let mechanism = security.sasl_mechanism.unwrap().as_str();
        let head = format!("SASL authentication failed for user \"{who}\" ({mechanism})");
        let text = connect_refused(&broker, &security, &secrets).await;
        assert!(text.contains(&head), "{why}: {text}");
        assert!(text.contains("not retried"), "{why}: {text}");
        let text = end_refused(&broker, &security, &secrets).await;
        assert!(text.contains(&head), "{why}: {text}");
    }
    let text = end_refused(&broker, &bob_wrong, &secrets).await;
    assert!(text.contains(&source), "{text}");

    // tansu does not enable PLAIN, and says so by closing the connection
    // at the SaslHandshake instead of answering UNSUPPORTED_SASL_MECHANISM
    // (a broker that answers is refused at once: `wire_tests`). To a
    // client that is a broker hanging up, which may pass: retried until
    // the deadline, retryable, the raw connection with a hint.
    let plain = as_("alice", "alice-pw-256", SaslMechanism::Plain);
    let short = Duration::from_secs(2);
    let err = Kafka::connect_secure(&servers, &plain, broker.secrets(), FIELD, short)
        .await
        .err()
        .expect("tansu has no PLAIN");
    assert!(err.is_retryable(), "{err}");
    assert!(!err.to_string().contains("alice-pw-256"), "{err}");
    let err = end_transaction(&servers, &plain, broker.secrets(), &txn(), true, short)
        .await
        .unwrap_err();
    assert!(err.is_retryable(), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("SaslHandshake to ")
            && text.contains("a broker that does not enable PLAIN may hang up"),
        "{text}"
    );
    assert!(!text.contains("alice-pw-256"), "{text}");

    // A password variable that is not set: named, nothing is tried.
    let unset = KafkaSecurity {
        sasl_password_file: None,
        sasl_password_env: Some("KAFKA_TEST_NO_SUCH_PASSWORD".into()),
        ..bob_wrong
    };
    let err = end_transaction(&servers, &unset, broker.secrets(), &txn(), true, DEADLINE)
        .await
        .unwrap_err();
    assert!(!err.is_retryable(), "{err}");
    assert!(
        err.to_string()
            .contains("sink.kafka.security.sasl_password_env")
            && err
                .to_string()
                .contains("KAFKA_TEST_NO_SUCH_PASSWORD is not set"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_and_scram_together_for_the_client_and_end_transaction() {
    let cluster = Cluster::new("kafka-sasl-ssl");
    let pki = KafkaPki::new(secrets_dir(&cluster).join("pki"));
    let users = users();
    let broker = Broker::start_secured(&cluster, &users, Some(&pki), false).await;
    let servers = broker.servers();
    let tls = tls_of(&broker);
    for user in &users {
        let security = login(&cluster, &tls, &user.name, &user.password, user.mechanism);
        assert_eq!(
            security.protocol,
            sluice_common::spec::SecurityProtocol::SaslSsl
        );
        let kafka = Kafka::connect_secure(&servers, &security, broker.secrets(), FIELD, DEADLINE)
            .await
            .unwrap_or_else(|e| panic!("{} logs in over TLS: {e}", user.name));
        write_and_read(&kafka, &format!("tls-by-{}", user.name), 10).await;

        // TLS, then SCRAM (the broker proves it knows the password), then
        // the broker's own answer: it has no EndTxn.
        let text = end_refused(&broker, &security, &[&user.password]).await;
        assert!(
            text.contains("the broker does not support EndTxn"),
            "{text}"
        );
        assert!(!text.contains("SASL"), "{text}");

        // The wrong password: the login is refused instead.
        let wrong = login(&cluster, &tls, &user.name, "wrong-pw", user.mechanism);
        let head = format!(
            "SASL authentication failed for user \"{}\" ({})",
            user.name,
            user.mechanism.as_str()
        );
        let text = end_refused(&broker, &wrong, &["wrong-pw", &user.password]).await;
        assert!(text.contains(&head), "{text}");
        let text = connect_refused(&broker, &wrong, &["wrong-pw", &user.password]).await;
        assert!(text.contains(&head), "{text}");
    }
}
