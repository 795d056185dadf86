"""The source layer every workflow step reads code through: the file walk (`walk`: discovery, excludes,
.gitignore, size and file-kind checks, one bounded read per file), the file read once and decoded once
(`files.SourceFile`), Python's string and statement edges found in bytes (`chunks`, with its C twin
`fastfind`), the meaning of names and strings (`names`: device strings, torch CUDA APIs, CUDA-only
packages) and accelport's source markers (`markers`). Inventory, migrate and run import from here, never
from each other's internals."""
