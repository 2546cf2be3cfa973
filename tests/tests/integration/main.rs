//! Sluice's integration tests, in one test binary: each file of this
//! directory is a module, so cargo links arrow, parquet and DataFusion into
//! one executable instead of one per file. A test's name starts with its
//! module (`chaos_random::random_schedule_keeps_exactly_once`): select a
//! file's tests with `cargo nextest run -p sluice-tests -E
//! 'test(/^chaos_random::/)'`.
//!
//! A new file here must be declared below (`layering` checks it). The tests
//! share one process under `cargo test` (nextest runs each in its own), so
//! none may change process-wide state: environment variables, the current
//! directory, signal handlers, a global logger.

mod bad_files;
mod bad_input;
mod bad_sql;
mod chains;
mod chaos_etcd;
mod chaos_firewalled;
mod chaos_handover;
mod chaos_leader_killed;
mod chaos_paused_leader;
mod chaos_random;
mod chaos_wrong_revoke;
mod dedup;
mod delta_deposed;
mod delta_sink;
mod driver_crash;
mod executor_crash;
mod failpoints;
mod file_chaos;
mod file_oracle;
mod finish;
mod ha_etcd_unreachable;
mod harness;
mod iceberg_deposed;
mod iceberg_sink;
mod kafka_bad_input;
mod kafka_chaos;
mod kafka_data_loss;
mod kafka_secrets;
mod kafka_security;
mod kafka_sink;
mod kafka_sink_prefix;
mod kafka_source;
mod kafka_transactions;
mod layering;
mod local_demo;
mod log_correlation;
mod manifests_run;
mod manifests_s3;
mod manifests_security;
mod manifests_settings;
mod manifests_static;
mod metrics;
mod multi_stream;
mod nexmark;
mod prerequisites;
mod progress_failover;
mod progress_follow;
mod readme_stateful;
mod rescale;
mod rescale_chain;
mod robust_auth_failures;
mod robust_batch_cap;
mod robust_checkpoint;
mod robust_conn_limits;
mod robust_empty_plan;
mod robust_executor_ids;
mod robust_failed_terminal;
mod robust_logs;
mod robust_memory;
mod robust_output_cap;
mod robust_poison;
mod robust_poison_sql;
mod robust_reported_files;
mod robust_rogue_executor;
mod robust_sink_links;
mod robust_sql_bounds;
mod robust_standalone;
mod robust_state_budget;
mod robust_state_identity;
mod robust_submit;
mod robust_task_memory;
mod robust_temp_files;
mod robust_web_origin;
mod s3_chaos;
mod s3_outage;
mod s3_storage;
mod security_auth;
mod security_full;
mod security_limits;
mod security_paths;
mod security_tls;
mod session_windows;
mod sink_compaction;
mod sink_oracle;
mod sql_oracle;
mod state_cli;
mod state_scale;
mod state_ttl;
mod stateful_chaos;
mod stateful_failover;
mod stateful_oracle;
mod stream_join;
mod stream_join_null_time;
mod verify_cli;
mod web_ui;
mod web_ui_auth;
mod web_ui_state;
mod windowed;
