//! Generated gRPC types and services for Sluice (`sluice.v1`).
#![allow(clippy::all, missing_docs)]

tonic::include_proto!("sluice.v1");

/// The encoded file descriptor set, for `tonic-reflection`.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("sluice_descriptor");

/// Response metadata key that carries the leader's address on a standby.
pub const LEADER_METADATA_KEY: &str = "sluice-leader";
