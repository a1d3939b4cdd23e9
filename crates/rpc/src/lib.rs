//! ONC RPC (RFC 5531) and NFSv3/NFSv4/MOUNT message decoding over XDR
