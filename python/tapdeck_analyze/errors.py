"""The errors a user can fix: the CLI prints each as one line."""


class DatasetError(Exception):
    """Bad input a user can fix; the CLI prints it as one line."""


class IncompleteDatasetError(DatasetError):
    """The dataset's conversion has not finished or was interrupted: some sources have no rows
    yet. Refused unless `allow_incomplete`; the CLI exits with 1 (not a usage error)."""
