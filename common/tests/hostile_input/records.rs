//! The checkpoint's records as every reader decodes them
//! ([`checkpoint::decode`], the function behind `QueryCheckpoint::read`,
//! `create` and `Checkpoint::epoch_claim`): `offsets/N`, `commits/N`,
//! `metadata`, `epochs/E`, `sources/*` and `stopped`.

use std::collections::BTreeMap;
use std::fmt::Debug;

use arrow_schema::{DataType, Field, Schema, TimeUnit};
use proptest::prelude::*;
use serde::Serialize;
use serde::de::DeserializeOwned;
use sluice_common::checkpoint::{
    CommitRecord, EPOCHS_DIR, FailRecord, FileLogEntry, FileRange, Inputs, KafkaRange, KafkaStart,
    KafkaStartRecord, Log, OffsetRecord, OperatorState, PartitionProgress, PhaseDurations,
    ProgressRecord, QUERIES_DIR, QueryMetadata, RateSourceMeta, Record, SchemaRecord, SourceFile,
    SourceOffsets, StateRebuild, StopRecord, TableFile, TableSchema, TablesRecord, decode, encode,
    padded,
};
use sluice_common::epochs::EpochClaim;

use crate::mutate::{apply_all, mutated, numbers, random_bytes};
use crate::names_file;

/// What a reader of a decoded record relies on, beyond its types.
trait Used {
    fn used(&self) -> Result<(), TestCaseError> {
        Ok(())
    }
}

impl Used for OffsetRecord {
    /// What the planners and the recovery do with a plan they read.
    fn used(&self) -> Result<(), TestCaseError> {
        for (_, s) in self.inputs.iter() {
            used_range(s)?;
        }
        Ok(())
    }
}

/// What a planner does with its range of a plan.
fn used_range(s: &SourceOffsets) -> Result<(), TestCaseError> {
    prop_assert!(s.end_value().checked_sub(s.start_value()).is_some());
    if let SourceOffsets::Files { files, tasks, .. } = s {
        for r in tasks.iter().flatten() {
            let f = files.get(r.file as usize);
            prop_assert!(f.is_some_and(|f| r.start <= r.end && r.end <= f.size));
        }
    }
    if let SourceOffsets::Kafka { partitions } = s {
        for r in partitions {
            prop_assert!(0 <= r.start && r.start <= r.end && r.end <= r.latest);
            prop_assert!(r.lost() <= r.start as u64);
        }
    }
    Ok(())
}

impl Used for CommitRecord {}
impl Used for ProgressRecord {}
impl Used for QueryMetadata {}
impl Used for EpochClaim {}
impl Used for FileLogEntry {}
impl Used for RateSourceMeta {}
impl Used for StopRecord {}
impl Used for FailRecord {}
impl Used for SchemaRecord {}
impl Used for TablesRecord {}
impl Used for KafkaStartRecord {}

pub type Check = fn(&[u8], &str) -> Result<(), TestCaseError>;

/// A record as its reader decodes it: an error names the file and the line
/// and column; a record that decodes encodes back to itself and is usable.
fn decoded<T>(bytes: &[u8], path: &str) -> Result<(), TestCaseError>
where
    T: Serialize + DeserializeOwned + PartialEq + Debug + Used,
{
    match decode::<T>(bytes, path) {
        Ok(record) => {
            let again = encode(&record).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let back: T = decode(&again, path).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(&back, &record);
            record.used()
        }
        Err(e) => {
            let text = e.to_string();
            prop_assert!(names_file(&text, path), "{}", text);
            prop_assert!(
                text.contains(" line ") && text.contains(" column "),
                "{}",
                text
            );
            Ok(())
        }
    }
}

fn schema() -> Schema {
    let item = Field::new("item", DataType::Utf8, true);
    Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
        Field::new("tags", DataType::List(item.into()), true),
    ])
}

/// Every kind of record: where it lives, a valid one, and its reader.
pub fn kinds() -> Vec<(String, Vec<u8>, Check)> {
    let q = |rel: &str| format!("/ckpt/{QUERIES_DIR}/q/{rel}");
    let files = SourceOffsets::Files {
        start_seq: 3,
        end_seq: 5,
        files: vec![
            SourceFile {
                path: "a.csv".into(),
                size: 100,
            },
            SourceFile {
                path: "b.csv".into(),
                size: 7,
            },
        ],
        tasks: vec![
            vec![FileRange {
                file: 0,
                start: 0,
                end: 60,
            }],
            vec![
                FileRange {
                    file: 0,
                    start: 60,
                    end: 100,
                },
                FileRange {
                    file: 1,
                    start: 0,
                    end: 7,
                },
            ],
        ],
    };
    let table = TableFile {
        path: "users.parquet".into(),
        size: 10,
        modified_ms: 1,
    };
    let offsets = |source| OffsetRecord {
        version: 1,
        batch_id: 7,
        epoch: 2,
        batch_timestamp_ms: 1_700_000_000_000,
        watermark_ms: Some(1_699_999_000_000),
        watermarks: BTreeMap::new(),
        inputs: Inputs::Source(source),
        max_rows_per_task: Some(100_000),
        max_rows_per_batch: Some(1_000_000),
        tables: BTreeMap::from([("users".to_string(), vec![table.clone()])]),
    };
    let rate = SourceOffsets::Rate {
        start_value: 100,
        end_value: 250,
    };
    let kafka = SourceOffsets::Kafka {
        partitions: vec![
            KafkaRange {
                topic: "events".into(),
                partition: 0,
                start: 40,
                end: 90,
                latest: 120,
                previous_end: Some(25),
            },
            KafkaRange {
                topic: "events".into(),
                partition: 1,
                start: 7,
                end: 7,
                latest: 7,
                previous_end: None,
            },
        ],
    };
    let table_schema = TableSchema {
        schema: schema(),
        dir: "/data".into(),
        file: Some("u.parquet".into()),
    };
    vec![
        (
            q(&Log::Offsets.entry(7)),
            bytes(&offsets(files)),
            decoded::<OffsetRecord> as Check,
        ),
        (
            q(&Log::Offsets.entry(8)),
            bytes(&offsets(rate)),
            decoded::<OffsetRecord>,
        ),
        (
            q(&Log::Offsets.entry(9)),
            bytes(&offsets(kafka)),
            decoded::<OffsetRecord>,
        ),
        (
            q(Record::KafkaStart.rel()),
            bytes(&KafkaStartRecord {
                version: 1,
                epoch: 2,
                partitions: vec![KafkaStart {
                    topic: "events".into(),
                    partition: 0,
                    offset: 12,
                }],
            }),
            decoded::<KafkaStartRecord>,
        ),
        (
            q(&Log::Commits.entry(7)),
            bytes(&CommitRecord {
                version: 1,
                batch_id: 7,
                epoch: 2,
                num_rows: 150,
                end_value: 250,
                committed_ms: 5,
                max_event_time_ms: Some(9),
                max_event_times: BTreeMap::new(),
                input_rows_total: Some(1500),
            }),
            decoded::<CommitRecord>,
        ),
        (
            q(&Log::Progress.entry(7)),
            bytes(&ProgressRecord {
                version: 1,
                query: Some("q".into()),
                batch_id: 7,
                epoch: 2,
                num_input_rows: 150,
                input_rows_per_second: 1234.5678,
                processed_rows_per_second: 0.1,
                duration_ms: PhaseDurations {
                    latest_offset: 1,
                    wal_commit: 2,
                    execution: 3,
                    sink_commit: 4,
                    commit: 5,
                    total: 15,
                    map: 1,
                    reduce: 2,
                },
                timestamp_ms: 1_700_000_000_000,
                bad_records: 1,
                state_rows_total: 10,
                state_bytes: 1024,
                state_expired: 2,
                watermark_ms: Some(1_699_999_000_000),
                rows_dropped_by_watermark: 3,
                records_lost: 15,
                num_output_rows: 40,
                sink_bytes: 4096,
                kafka_transactions: None,
                partitions: vec![PartitionProgress {
                    topic: "events".into(),
                    partition: 0,
                    start_offset: 40,
                    end_offset: 90,
                    latest_offset: 120,
                }],
                state_operators: vec![OperatorState {
                    name: "aggregate".into(),
                    rows: 10,
                    bytes: 1024,
                }],
                rows_without_event_time: 4,
                state_rebuild: Some(StateRebuild {
                    partitions: 3,
                    partitions_read: 12,
                    rows: 10,
                    duration_ms: 20,
                }),
            }),
            decoded::<ProgressRecord>,
        ),
        (
            q(Record::Metadata.rel()),
            bytes(&QueryMetadata {
                version: 1,
                id: uuid::Uuid::nil(),
                name: "q".into(),
                created_ms: 1,
                epoch: 3,
            }),
            decoded::<QueryMetadata>,
        ),
        (
            format!("/ckpt/{EPOCHS_DIR}/{}", padded(3)),
            bytes(&EpochClaim {
                version: 1,
                driver: "d1".into(),
                advertise: "h:7070".into(),
                claimed_ms: 1,
            }),
            decoded::<EpochClaim>,
        ),
        (
            q(&Log::SourceFiles.entry(7)),
            bytes(&FileLogEntry {
                version: 1,
                batch_id: 7,
                files: vec!["a.csv".into(), "b.csv".into()],
            }),
            decoded::<FileLogEntry>,
        ),
        (
            q(Record::RateStart.rel()),
            bytes(&RateSourceMeta {
                version: 1,
                start_ms: 1,
                epoch: 2,
            }),
            decoded::<RateSourceMeta>,
        ),
        (
            q(Record::Stopped.rel()),
            bytes(&StopRecord {
                version: 1,
                stopped_ms: 1,
                epoch: 2,
            }),
            decoded::<StopRecord>,
        ),
        (
            q(Record::Failed.rel()),
            bytes(&FailRecord {
                version: 1,
                failed_ms: 1,
                epoch: 2,
                error: "task failed: division by zero".into(),
            }),
            decoded::<FailRecord>,
        ),
        (
            q(Record::Schema.rel()),
            bytes(&SchemaRecord {
                version: 1,
                schema: schema(),
                epoch: 2,
            }),
            decoded::<SchemaRecord>,
        ),
        (
            q(Record::Tables.rel()),
            bytes(&TablesRecord {
                version: 1,
                tables: BTreeMap::from([("users".into(), table_schema)]),
                epoch: 2,
            }),
            decoded::<TablesRecord>,
        ),
    ]
}

fn bytes<T: Serialize>(record: &T) -> Vec<u8> {
    encode(record).unwrap().to_vec()
}

fn seeds() -> Vec<Vec<u8>> {
    kinds().into_iter().map(|(_, seed, _)| seed).collect()
}

/// Decodes `bytes` as record kind `kind` of [`kinds`].
fn check(kind: usize, bytes: &[u8]) -> Result<(), TestCaseError> {
    let (path, _, decode_as) = &kinds()[kind];
    decode_as(bytes, path)
}

proptest! {
    #![proptest_config(crate::config())]

    #[test]
    fn random_bytes_are_refused_naming_the_file(kind in 0..kinds().len(), bytes in random_bytes()) {
        check(kind, &bytes)?;
    }

    #[test]
    fn mutated_records_decode_whole_or_are_refused_naming_the_file((kind, bytes) in mutated(seeds())) {
        check(kind, &bytes)?;
    }

    /// The plans (kinds 0 and 1) with hostile numbers: a plan is made of
    /// numbers that must agree with one another.
    #[test]
    fn plans_with_hostile_numbers_are_consistent_or_refused(kind in 0..2usize, changes in numbers()) {
        check(kind, &apply_all(kinds()[kind].1.clone(), &changes))?;
    }
}
