"""File › Export: a view's table as CSV or Parquet, its plot as PNG or SVG, the HTML report, and the
browser's version written by Spark. Writing runs on the ``export`` channel of the runner."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from PySide6.QtCore import QObject, QRectF, QSize, Signal
from PySide6.QtGui import QAction, QKeySequence, QPainter
from PySide6.QtSvg import QSvgGenerator
from PySide6.QtWidgets import QFileDialog, QInputDialog, QWidget

from statelens.app.export import check_output_path, iter_export_display_table, iter_export_report
from statelens.app.gui import errors
from statelens.app.gui.controllers.browser import BrowserController
from statelens.app.gui.controllers.context import Controller, WindowContext
from statelens.readers.errors import UsageError
from statelens.viewers.tables import DataTableView

#: The runner channel of every export.
CHANNEL = "export"


class ExportController(QObject):
    """Writes what the views show; asks where with dialogs parented to ``window``.

    Parameters
    ----------
    ctx : WindowContext
    window : QWidget
        The parent of the file dialogs.
    controllers : mapping of str to Controller
        The tabs' controllers by view name (their tables, plots and typed export jobs).
    browser : BrowserController
        Whose version Spark writes.
    current_view : callable
        The name of the view showing.

    Signals
    -------
    finished(str path)
        A table, plot or report was written.
    """

    finished = Signal(str)

    def __init__(
        self,
        ctx: WindowContext,
        window: QWidget,
        controllers: Mapping[str, Controller],
        browser: BrowserController,
        current_view: Callable[[], str],
    ) -> None:
        super().__init__(ctx)
        self.ctx = ctx
        self.window = window
        self.settings = ctx.settings  # the last export folder
        self.controllers = controllers
        self.browser = browser
        self.current_view = current_view
        self._build_actions()

    def _build_actions(self) -> None:
        def action(text: str, slot: Callable[[], object], tip: str = "") -> QAction:
            made = QAction(text, self.window)
            made.triggered.connect(slot)
            if tip:
                made.setToolTip(tip)
            return made

        self.csv_action = action("Export table as &CSV…", lambda: self.export_current_table("csv"))
        self.parquet_action = action(
            "Export table as &Parquet…", lambda: self.export_current_table("parquet")
        )
        self.png_action = action("Export plot as P&NG…", lambda: self.export_current_plot("png"))
        self.svg_action = action("Export plot as S&VG…", lambda: self.export_current_plot("svg"))
        self.spark_parquet_action = action(
            "Write version with &Spark (Parquet)…",
            self.spark_parquet_dialog,
            "Spark writes the browser's store version (every partition, or the one shown) as Parquet to a "
            "folder or Hadoop URL where it runs (s3a://, hdfs://...): nothing is collected to this app",
        )
        self.report_action = action("Export &HTML report…", self.export_report_dialog)
        self.report_action.setShortcut(QKeySequence("Ctrl+E"))
        self.window.addAction(self.report_action)

    def menu_actions(self) -> list[QAction]:
        """File › Export, in menu order."""
        return [
            self.csv_action,
            self.parquet_action,
            self.png_action,
            self.svg_action,
            self.spark_parquet_action,
            self.report_action,
        ]

    def update_actions(self) -> None:
        """Enable what the view showing can export (the File menu is about to show)."""
        for made in (self.csv_action, self.parquet_action):
            made.setEnabled(self.main_table() is not None)
        for made in (self.png_action, self.svg_action):
            made.setEnabled(self.main_plot() is not None)
        self.report_action.setEnabled(self.ctx.loaded is not None)
        table = self.browser.state_table()
        self.spark_parquet_action.setEnabled(table is not None and not table.is_diff)

    def main_table(self, view: str | None = None) -> DataTableView | None:
        ctl = self.controllers.get(view or self.current_view())
        return ctl.main_table() if ctl is not None else None

    def main_plot(self, view: str | None = None) -> Any:
        ctl = self.controllers.get(view or self.current_view())
        return ctl.main_plot() if ctl is not None else None

    # -- dialogs ---------------------------------------------------------------------------------------
    def export_current_table(self, fmt: str) -> None:
        table = self.main_table()
        if table is not None:
            self.export_table_dialog(table, fmt)

    def export_current_plot(self, fmt: str) -> None:
        if self.main_plot() is None:
            return
        name = f"{self.current_view()}.{fmt}"
        path, _ = QFileDialog.getSaveFileName(
            self.window, f"Export plot as {fmt.upper()}", self.export_dir(name), f"{fmt.upper()} (*.{fmt})"
        )
        if path:
            self.export_plot(self.current_view(), path)

    def export_table_dialog(self, table: DataTableView, fmt: str) -> None:
        name = f"{table.name.replace(' ', '_')}.{fmt}"
        path, _ = QFileDialog.getSaveFileName(
            self.window,
            f"Export {table.name} as {fmt.upper()}",
            self.export_dir(name),
            "CSV (*.csv)" if fmt == "csv" else "Parquet (*.parquet)",
        )
        if path:
            self.export_table(table, path, fmt)

    def export_report_dialog(self) -> None:
        if self.ctx.loaded is None:
            return
        path, _ = QFileDialog.getSaveFileName(
            self.window, "Export HTML report", self.export_dir("statelens-report.html"), "HTML (*.html)"
        )
        if path:
            self.export_report(path)

    def spark_parquet_dialog(self) -> None:
        if self.browser.state_table() is None:
            return
        url, ok = QInputDialog.getText(
            self.window,
            "Write version with Spark",
            "Folder or Hadoop URL Spark writes the Parquet part files to (it must not exist; on a cluster, "
            "a path every executor can write, e.g. s3a://bucket/prefix):",
            text=self.export_dir("statelens-state-parquet"),
        )
        if ok and url.strip():
            self.write_version_with_spark(url.strip())

    def export_dir(self, name: str) -> str:
        folder = str(self.settings.value("export_dir", "") or os.path.expanduser("~"))
        return os.path.join(folder, name)

    def _checked_path(self, path: str) -> str | None:
        loaded = self.ctx.loaded
        try:
            out = check_output_path(path, loaded.url if loaded is not None else None)
        except UsageError as err:
            errors.show_error(err, title="Cannot export there")
            return None
        self.settings.setValue("export_dir", os.path.dirname(out))
        return out

    # -- writing ---------------------------------------------------------------------------------------
    def export_table(self, table: DataTableView, path: str, fmt: str) -> int | None:
        """Write a table to CSV or Parquet in a worker (the state browser's rows typed, as ``statelens rows``).

        Parameters
        ----------
        table : DataTableView
            One of the window's tables; its filter and sort order are kept.
        path : str
        fmt : {"csv", "parquet"}

        Returns
        -------
        int or None
            The job's token (None when the path was refused).
        """

        out = self._checked_path(path)
        if out is None:
            return None
        model: Any = table.model()
        source: Any = model.sourceModel() if hasattr(model, "sourceModel") else model
        job = next(
            (
                j
                for ctl in self.controllers.values()
                if (j := ctl.export_job(table, source, out, fmt)) is not None
            ),
            None,
        )
        if job is None:
            rows = source.visible_source_rows()
            job = (
                iter_export_display_table,
                source.headers(),
                source.columns(),
                source.sort_keys(),
                out,
                fmt,
                rows,
            )
        return self.ctx.runner.submit(
            CHANNEL,
            *job,
            what=f"Exporting {table.name} to {os.path.basename(out)}",
            on_result=lambda n: self._on_finished(out, f"{n:,} rows of {table.name}"),
            on_error=lambda err: self._on_errored(err, "Export failed"),
        )

    def export_plot(self, view: str, path: str) -> str | None:
        """Write a view's plots to PNG or SVG (by the file's extension), on the GUI thread (it is quick).

        Parameters
        ----------
        view : str
            ``timeline``, ``growth`` or ``expired``.
        path : str

        Returns
        -------
        str or None
            The path written.
        """
        import pyqtgraph.exporters as exporters  # deferred: pyqtgraph (heavy)

        graphics = self.main_plot(view)
        if graphics is None:
            raise UsageError(f"the {view} view has no plot; plots: timeline, growth, expired")
        out = self._checked_path(path)
        if out is None:
            return None
        scene = graphics.scene()
        if out.lower().endswith(".svg"):
            try:
                exporters.SVGExporter(scene).export(out)
            except ValueError:
                # pyqtgraph 0.14's SVGExporter cannot parse closed paths ("... Z") that Qt 6.10+ writes
                # (pyqtgraph#3495): render the scene with Qt's own SVG generator instead.
                _render_svg(scene, graphics, out)
        else:
            exporter = exporters.ImageExporter(scene)
            params = exporter.parameters()
            # Native size: scaling up leaves legend text at its screen size (tiny next to the axes).
            from statelens.viewers import theme  # deferred: theme imports pyqtgraph

            params["background"] = theme.background()
            exporter.export(out)
        self._on_finished(out, f"{self.controllers[view].title.lower()} plot")
        return out

    def export_report(self, path: str) -> int | None:
        """Write the whole checkpoint's HTML post-mortem report in a worker."""

        if self.ctx.loaded is None:
            return None
        out = self._checked_path(path)
        if out is None:
            return None
        return self.ctx.runner.submit(
            CHANNEL,
            iter_export_report,
            self.ctx.loaded.checkpoint,
            out,
            what="Writing the HTML report",
            on_result=lambda p: self._on_finished(p, "HTML report"),
            on_error=lambda err: self._on_errored(err, "Writing the report failed"),
        )

    def write_version_with_spark(self, url: str) -> int | None:
        """Have Spark write the browser's store version (its partition, when one is shown) as Parquet to
        ``url`` (a folder it creates, or a Hadoop URL) where Spark runs, on the toolbar's Spark master or
        endpoint; nothing is collected here. Returns the job's token (None without a table)."""
        got = self.browser.spark_job(url)
        if got is None:
            return None
        what, job = got
        return self.ctx.runner.submit(
            CHANNEL,
            *job,
            what=what,
            on_result=lambda n: self._on_finished(url, f"{n:,} rows (written by Spark)"),
            on_error=lambda err: self._on_errored(err, "Spark could not write the version"),
        )

    def _on_errored(self, err: BaseException, title: str) -> None:
        self.ctx.status(f"{title}: {errors.short_message(err)}")
        errors.show_error(err, title=title)

    def _on_finished(self, path: str, what: str) -> None:
        self.ctx.status(f"Wrote {what} to {path}")
        self.finished.emit(path)


def _render_svg(scene: Any, widget: Any, path: str) -> None:
    """Render a graphics scene to an SVG file with Qt's ``QSvgGenerator`` (vector, fonts as text)."""

    rect = QRectF(0, 0, widget.width(), widget.height())
    generator = QSvgGenerator()
    generator.setFileName(path)
    generator.setSize(QSize(int(rect.width()), int(rect.height())))
    generator.setViewBox(rect)
    # Same resolution as the screen the scene was laid out for, or curves and axes scale apart.
    generator.setResolution(widget.logicalDpiX())
    generator.setTitle("statelens plot")
    painter = QPainter(generator)
    try:
        from statelens.viewers import theme  # deferred: theme imports pyqtgraph

        painter.fillRect(rect, theme.background())
        scene.render(painter, rect, widget.mapToScene(widget.viewport().rect()).boundingRect())
    finally:
        painter.end()
