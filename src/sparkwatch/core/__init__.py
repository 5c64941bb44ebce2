"""The pure measurement core: no asyncio, aiohttp, asyncssh, sqlite3, pynvml or psutil here.

Every number in an export is decided by functions in this package: clock offsets, windows and scopes,
interval power and the utilisation gate, energy, memory, verdicts, the export and its schema.
"""
