//! Storage on a real S3-compatible server (moto, on loopback):
//! - the server refuses a second conditional create (`If-None-Match: *`)
//!   with 412, which is what makes create-only writes on S3 meaningful;
//! - a create-only write adopts what is there; a large file goes up in
//!   parts and is visible only when complete, create-only too;
//! - a missing bucket, refused credentials and a missing region stop a
//!   driver at start with an error that names the cause, and a sink in a
//!   missing bucket is refused at submit naming the field;
//! - a query whose checkpoint and sink are on S3 ends exactly-once.

use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use sluice_common::storage::{Created, Path as Key, Visible};
use sluice_tests::{
    Cluster, DriverOpts, ExecutorOpts, QueryState, READY_TIMEOUT, S3, Spec, assert_exactly_once_at,
};
use tonic::Code;

const BUCKET: &str = "sluice";

async fn moto(cluster: &Cluster) -> S3 {
    let s3 = S3::start(cluster, "moto", false).await;
    s3.create_bucket(BUCKET).await;
    s3
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_refuses_a_second_conditional_create_with_412() {
    let cluster = Cluster::new("s3-412");
    let s3 = moto(&cluster).await;
    // boto3 from the server's own venv: an S3 client independent of Sluice.
    let script = r#"
import sys, boto3, botocore
s3 = boto3.client("s3", endpoint_url=sys.argv[1], region_name="us-east-1",
                  aws_access_key_id="k", aws_secret_access_key="s")
s3.put_object(Bucket="sluice", Key="once", Body=b"one", IfNoneMatch="*")
try:
    s3.put_object(Bucket="sluice", Key="once", Body=b"two", IfNoneMatch="*")
    print("second put accepted")
except botocore.exceptions.ClientError as e:
    print(e.response["ResponseMetadata"]["HTTPStatusCode"], e.response["Error"]["Code"])
print(s3.get_object(Bucket="sluice", Key="once")["Body"].read().decode())
"#;
    let python = sluice_tests::s3::moto_bin().with_file_name("python");
    let out = tokio::process::Command::new(python)
        .args(["-c", script, &s3.endpoint()])
        .output()
        .await
        .expect("run python");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout, "412 PreconditionFailed\none\n");

    // Through Sluice's storage: the second create adopts the first's bytes.
    let storage = s3.stores().open(&format!("s3://{BUCKET}/root")).unwrap();
    storage.probe().await.unwrap();
    let key = Key::from("a/b");
    let first = storage.create(&key, Bytes::from("one")).await.unwrap();
    assert_eq!(first, Created::New);
    let second = storage.create(&key, Bytes::from("two")).await.unwrap();
    assert_eq!(second, Created::Existing(Bytes::from("one")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_files_go_up_in_parts_create_only() {
    let cluster = Cluster::new("s3-multipart");
    let s3 = moto(&cluster).await;
    let storage = s3.stores().open(&format!("s3://{BUCKET}/sink")).unwrap();
    let key = Key::from("part-big");
    let chunk = Bytes::from(vec![7u8; 3 << 20]);
    let write = |chunks: Vec<Bytes>| {
        let (storage, key) = (storage.clone(), key.clone());
        async move {
            let before = storage.size(&key).await.unwrap();
            let mut w = storage.begin_visible(&key).await.unwrap();
            for c in chunks {
                w.write(c).await.unwrap();
                // What is there does not change before the upload completes.
                assert_eq!(storage.size(&key).await.unwrap(), before);
            }
            w.finish().await.unwrap()
        }
    };
    let three = vec![chunk.clone(), chunk.clone(), chunk.clone()];
    assert_eq!(write(three.clone()).await, Visible::New { bytes: 9 << 20 });
    assert_eq!(storage.size(&key).await.unwrap(), Some(9 << 20));
    assert_eq!(write(three).await, Visible::Identical { bytes: 9 << 20 });
    let other = vec![
        chunk.clone(),
        chunk.clone(),
        Bytes::from(vec![8u8; 3 << 20]),
    ];
    assert_eq!(write(other).await, Visible::Different);
    // A small file is one conditional put, compared the same way.
    let small = Key::from("part-small");
    let mut w = storage.begin_visible(&small).await.unwrap();
    w.write(Bytes::from("abc")).await.unwrap();
    assert_eq!(w.finish().await.unwrap(), Visible::New { bytes: 3 });
    let mut w = storage.begin_visible(&small).await.unwrap();
    w.write(Bytes::from("abd")).await.unwrap();
    assert_eq!(w.finish().await.unwrap(), Visible::Different);
    assert_eq!(storage.get(&small).await.unwrap(), Some(Bytes::from("abc")));
}

/// Starts a driver with `env` and `root`, and returns its log once it exited.
async fn failed_start(cluster: &Cluster, root: &str, env: Vec<(String, String)>) -> String {
    let driver = cluster.start_driver_with(DriverOpts {
        checkpoint_root: Some(root.to_string()),
        env,
        ..DriverOpts::default()
    });
    let status = driver
        .process()
        .wait_exit(Duration::from_secs(60))
        .await
        .unwrap_or_else(|| {
            let tail = driver.process().log_tail(20);
            panic!("the driver on {root} is still up:\n{tail}")
        });
    assert!(!status.success(), "{status}");
    std::fs::read_to_string(driver.process().log_path()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_s3_settings_fail_at_start_naming_the_cause() {
    let cluster = Cluster::new("s3-bad-config");
    let s3 = moto(&cluster).await;

    let log = failed_start(&cluster, "s3://no-such-bucket/ckpt", s3.env()).await;
    assert!(
        log.contains("s3://no-such-bucket/ckpt: the bucket does not exist"),
        "{log}"
    );

    let no_region: Vec<_> = s3
        .env()
        .into_iter()
        .filter(|(k, _)| k != "AWS_REGION")
        .collect();
    let log = failed_start(&cluster, &format!("s3://{BUCKET}/ckpt"), no_region).await;
    assert!(
        log.contains("s3://sluice: no region: set AWS_REGION"),
        "{log}"
    );

    // A server that checks credentials knows none of these keys.
    let strict = S3::start(&cluster, "moto-auth", true).await;
    let log = failed_start(&cluster, &format!("s3://{BUCKET}/ckpt"), strict.env()).await;
    assert!(
        log.contains("access denied; check the credentials"),
        "{log}"
    );
    assert!(log.contains("InvalidAccessKeyId"), "{log}");

    // A sink in a bucket that does not exist is refused at submit (once
    // `--allowed-paths` lets it past the default, the checkpoint's bucket).
    let driver = cluster.start_driver_with(DriverOpts {
        checkpoint_root: Some(format!("s3://{BUCKET}/ckpt")),
        env: s3.env(),
        extra_args: vec![
            "--allowed-paths".into(),
            format!("s3://{BUCKET}/,s3://no-such-bucket/"),
        ],
        ..DriverOpts::default()
    });
    driver.wait_ready(READY_TIMEOUT).await;
    let spec = Spec::new("q", Path::new("s3://no-such-bucket/out")).total_rows(10);
    let err = cluster
        .client(driver.addr())
        .submit(&spec.to_yaml())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err}");
    assert!(
        err.message()
            .contains("sink.files.path: s3://no-such-bucket/out: the bucket does not exist"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_with_its_checkpoint_and_sink_on_s3_is_exactly_once() {
    const TOTAL: u64 = 3000;
    let cluster = Cluster::new("s3-query");
    let s3 = moto(&cluster).await;
    let driver = cluster.start_driver_with(DriverOpts {
        checkpoint_root: Some(format!("s3://{BUCKET}/ckpt")),
        env: s3.env(),
        ..DriverOpts::default()
    });
    driver.wait_ready(READY_TIMEOUT).await;
    let _executor = cluster.start_executor_with(
        driver.addr(),
        ExecutorOpts {
            env: s3.env(),
            ..ExecutorOpts::default()
        },
    );
    let sink = format!("s3://{BUCKET}/out");
    let spec = Spec::new("q", Path::new(&sink))
        .rows_per_second(2000)
        .total_rows(TOTAL)
        .interval_ms(100);
    let mut client = cluster.client(driver.addr());
    client.submit(&spec.to_yaml()).await.expect("submit");
    client
        .wait_state("q", QueryState::Finished, Duration::from_secs(90))
        .await;
    assert_exactly_once_at(&s3.stores(), &sink, TOTAL).await;
}
