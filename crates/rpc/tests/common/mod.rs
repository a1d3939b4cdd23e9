//! Helpers shared by the integration tests: a pcap walk that finds RPC messages, tshark as the
//! oracle, and builders for hand-made messages.
#![allow(dead_code)]

pub mod craft;
pub mod tshark;
