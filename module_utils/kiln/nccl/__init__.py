# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""nccl-tests output, parsed (family ``nccl``; imports no other family). In dependency order:

- ``result``: limits, statuses, the result record and its final verdict
- ``layout``: the text table's column layouts and result rows
- ``text``: text output (nccl-tests and kiln's CPU engine): runs, comment lines, table, footer
- ``json_doc``: ``-J`` JSON documents (nccl-tests 2.17.7+)
- ``parse``: the one entry point, text or JSON, and kiln's CPU engine
"""
