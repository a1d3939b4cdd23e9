//! Zero-copy packet header views, symmetric flow keys, TCP stream reassembly and ONC RPC
//! record framing.
//!
//! - [`wire`]: typed zero-copy views over each header (Ethernet, VLAN, SLL/SLL2, BSD
//!   loopback, IPv4, IPv6 and its extension headers, TCP, UDP, ICMP) and their [`wire::Error`].
//! - [`packet`]: [`dissect`] a frame of a pcap link type into [`Headers`] (no allocation),
//!   through the views; [`link`] finds the network header under each link type.
//! - [`flow`]: [`FlowKey`] and the stable, symmetric [`flow_id`] stored in datasets.
//! - [`fragments`]: [`FragmentReassembler`], IPv4/IPv6 fragment reassembly in packet time,
//!   bounded (timeout, bytes held, datagrams in progress).
//! - [`headers`]: [`headers_len`], where header-only capture cuts a frame.
//! - [`tcp`]: [`TcpReassembler`] (one direction) and [`ConnectionTable`] (bounded).
//! - [`rpc_framing`]: [`RpcFramer`] (record marking, resync, snap-length holes) and
//!   [`TcpRpcTracker`], which goes from dissected packets to RPC messages.
//!
//! Nothing here panics on input bytes, and nothing allocates in proportion to a length
//! field: buffers grow only with bytes actually captured, within configured bounds.

pub mod flow;
pub mod fragments;
pub mod headers;
pub mod link;
pub mod packet;
pub mod rpc_framing;
pub mod tcp;
pub mod wire;

pub use flow::{flow_id, FlowKey};
pub use fragments::{FragmentConfig, FragmentCounters, FragmentReassembler, Reassembled};
pub use headers::{headers_len, HeaderDepth};
pub use packet::{dissect, Fragment, Headers, IpHeader, Transport};
pub use rpc_framing::{
    probe_rpc_header, RpcFramer, RpcMessage, TcpRpcTracker, TrackerConfig, TrackerCounters,
};
pub use tcp::{ConnectionTable, GapCause, Segment, StreamEvent, TcpReassembler};
