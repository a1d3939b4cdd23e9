//! Zero-copy packet header views, symmetric flow keys, TCP stream reassembly and ONC RPC record framing
