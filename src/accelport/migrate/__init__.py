"""`accelport migrate`: rewrite CUDA PyTorch code into PyTorch's device-agnostic API, with markers for the rest.

    from accelport.migrate import migrate, migrate_source, Options
    result = migrate(["src/"], options=Options(select=("AP11",)))
    print(render_diff(result))

Inventory's findings drive the codemods (one module per API family in `codemods/`);
libcst parses only the spans being rewritten; what has no portable form gets an inline
`# accelport: APxxxx: ...` marker. See docs/migrate.md.
"""

from accelport.migrate.engine import Options, migrate, migrate_source, parse_select
from accelport.migrate.model import Change, FileMigration, MigrationResult

__all__ = ["Change", "FileMigration", "MigrationResult", "Options", "migrate", "migrate_source", "parse_select"]
