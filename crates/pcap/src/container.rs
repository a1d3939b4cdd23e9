//! The chunked compressed container. (in progress)
