//! Semantic checks that `tapdeck verify` applies on top of the reader's structural ones.
//! TO BE IMPLEMENTED.
