//! Anonymization for tapdeck datasets: reversible deterministic name encryption (AES-SIV) and prefix-preserving IP address mapping (Crypto-PAn)
