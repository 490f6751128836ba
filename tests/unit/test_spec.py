"""data_schemas/_spec.py: rows that do not fit a table's schema are refused naming the table."""
import pytest

from data_schemas import TABLES, TableError
from tests_support import clean_rows


@pytest.mark.parametrize("name", sorted(TABLES))
def test_null_keys_are_rejected_at_write_time(name):
    spec = TABLES[name]
    row = dict(clean_rows()[name][0])
    row[spec.key[0]] = None
    with pytest.raises(TableError, match=f"table {name}"):
        spec.from_rows([row])


def test_rows_not_matching_schema_name_table():
    with pytest.raises(TableError, match="table captions"):
        TABLES["captions"].from_rows([{"caption_id": "x"}])
