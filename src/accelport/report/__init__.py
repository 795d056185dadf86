"""Writers shared by every command: terminal tables, Markdown, self-contained HTML, JUnit XML, SVG charts."""
