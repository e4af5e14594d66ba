// SPDX-License-Identifier: MIT
#include "heatmap/heatmap_gl_canvas.h"

#include <backends/imgui_impl_opengl3.h>
#include <imgui.h>

#include <QMouseEvent>
#include <QOpenGLContext>
#include <QOpenGLFunctions>
#include <cfloat>

#include "heatmap/heatmap_colours.h"
#include "heatmap/heatmap_image.h"
#include "heatmap/heatmap_interaction.h"

namespace moewb::gui {
namespace {

ImU32 toImColour(const QColor& c, int alpha = 255) {
  return IM_COL32(c.red(), c.green(), c.blue(), alpha);
}
ImVec2 toIm(QPointF p) {
  return ImVec2(float(p.x()), float(p.y()));
}

// ImGui keeps a current-context global; every entry point sets ours and restores the previous one so
// several canvases (and any other ImGui user) do not trample each other.
class ImGuiContextScope {
 public:
  explicit ImGuiContextScope(ImGuiContext* ctx) : previous_(ImGui::GetCurrentContext()) {
    ImGui::SetCurrentContext(ctx);
  }
  ~ImGuiContextScope() { ImGui::SetCurrentContext(previous_); }

 private:
  ImGuiContext* previous_;
};

}  // namespace

HeatmapGlCanvas::HeatmapGlCanvas(HeatmapInteraction* interaction, QWidget* parent)
    : QOpenGLWidget(parent), interaction_(interaction) {
  setMouseTracking(true);
  setMinimumSize(240, 160);
  connect(interaction_, &HeatmapInteraction::viewChanged, this, qOverload<>(&QWidget::update));
  connect(interaction_, &HeatmapInteraction::selectionChanged, this, qOverload<>(&QWidget::update));
}

HeatmapGlCanvas::~HeatmapGlCanvas() {
  shutdownImGui();
}

void HeatmapGlCanvas::shutdownImGui() {
  if (!imgui_) return;
  makeCurrent();  // the backend deletes its GL objects: they belong to our context
  if (cellTexture_ && context()) {
    context()->functions()->glDeleteTextures(1, &cellTexture_);
    cellTexture_ = 0;
    textureRevision_ = -1;
  }
  {
    ImGuiContextScope scope(imgui_);
    ImGui_ImplOpenGL3_Shutdown();
  }
  doneCurrent();
  ImGui::DestroyContext(imgui_);
  imgui_ = nullptr;
}

void HeatmapGlCanvas::initializeGL() {
  // The context can be recreated (e.g. when the widget is re-parented); start ImGui's GL state afresh.
  shutdownImGui();
  ImGuiContext* previous = ImGui::GetCurrentContext();
  imgui_ = ImGui::CreateContext();
  ImGui::SetCurrentContext(imgui_);
  ImGuiIO& io = ImGui::GetIO();
  io.IniFilename = nullptr;  // no imgui.ini files next to the user's data
  io.LogFilename = nullptr;
  if (palette().color(QPalette::Window).lightness() < 128)
    ImGui::StyleColorsDark();
  else
    ImGui::StyleColorsLight();
  ImGui_ImplOpenGL3_Init("#version 130");
  ImGui::SetCurrentContext(previous);
  connect(context(), &QOpenGLContext::aboutToBeDestroyed, this, &HeatmapGlCanvas::shutdownImGui,
          Qt::UniqueConnection);
  frameClock_.start();
}

void HeatmapGlCanvas::resizeGL(int, int) {
  interaction_->setWidgetSize(size());
}

void HeatmapGlCanvas::paintGL() {
  if (!imgui_) return;
  ImGuiContextScope scope(imgui_);
  ImGuiIO& io = ImGui::GetIO();
  io.DisplaySize = ImVec2(float(width()), float(height()));
  const float dpr = float(devicePixelRatioF());
  io.DisplayFramebufferScale = ImVec2(dpr, dpr);
  io.DeltaTime = std::max(1e-4f, float(frameClock_.restart()) / 1000.f);
  const QPoint hover = interaction_->hoverCell();
  io.MousePos = hover.x() >= 0 ? toIm(interaction_->hoverPos()) : ImVec2(-FLT_MAX, -FLT_MAX);
  io.MouseDown[0] = buttons_ & Qt::LeftButton;
  io.MouseDown[1] = buttons_ & Qt::RightButton;
  io.MouseDown[2] = buttons_ & Qt::MiddleButton;

  ImGui_ImplOpenGL3_NewFrame();
  ImGui::NewFrame();
  drawHeatmap();
  ImGui::Render();

  QOpenGLFunctions* gl = context()->functions();
  const QColor base = palette().color(QPalette::Base);
  gl->glViewport(0, 0, int(width() * dpr), int(height() * dpr));
  gl->glClearColor(base.redF(), base.greenF(), base.blueF(), 1.f);
  gl->glClear(GL_COLOR_BUFFER_BIT);
  ImGui_ImplOpenGL3_RenderDrawData(ImGui::GetDrawData());
}

bool HeatmapGlCanvas::updateCellTexture(bool dark) {
  const HeatmapInteraction& in = *interaction_;
  QOpenGLFunctions* gl = context()->functions();
  if (cellTexture_ && textureRevision_ == in.dataRevision() && textureDark_ == dark) return true;
  GLint maxSize = 0;
  gl->glGetIntegerv(GL_MAX_TEXTURE_SIZE, &maxSize);
  if (in.data().columns() > maxSize || in.data().rows() > maxSize) return false;
  const QImage image = heatmapCellImage(in.data(), in.scale(), dark);
  if (!cellTexture_) gl->glGenTextures(1, &cellTexture_);
  gl->glBindTexture(GL_TEXTURE_2D, cellTexture_);
  // Nearest: a cell stays one flat colour however far it is zoomed.
  gl->glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_MIN_FILTER, GL_NEAREST);
  gl->glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_MAG_FILTER, GL_NEAREST);
  gl->glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_WRAP_S, GL_CLAMP_TO_EDGE);
  gl->glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_WRAP_T, GL_CLAMP_TO_EDGE);
  gl->glPixelStorei(GL_UNPACK_ALIGNMENT, 4);
  gl->glTexImage2D(GL_TEXTURE_2D, 0, GL_RGBA, image.width(), image.height(), 0, GL_RGBA, GL_UNSIGNED_BYTE,
                   image.constBits());
  textureRevision_ = in.dataRevision();
  textureDark_ = dark;
  return true;
}

void HeatmapGlCanvas::drawHeatmap() {
  const HeatmapInteraction& in = *interaction_;
  const HeatmapData& d = in.data();
  const QPalette pal = palette();
  const bool dark = pal.color(QPalette::Window).lightness() < 128;
  const ImU32 textColour = toImColour(pal.color(QPalette::Text));
  ImDrawList* dl = ImGui::GetBackgroundDrawList();
  if (d.empty()) {
    const char* msg = "No data yet";
    const ImVec2 sz = ImGui::CalcTextSize(msg);
    dl->AddText(ImVec2((width() - sz.x) / 2, (height() - sz.y) / 2), textColour, msg);
    return;
  }
  const QRectF plot = in.plotArea();
  const auto v = in.visibleCells();
  const double cw = in.cellWidth(), ch = in.cellHeight();
  const float gap = (cw >= 8 && ch >= 8) ? 1.f : 0.f;
  const ImU32 empty = toImColour(emptyCellColour(dark));
  const ImU32 highlight = toImColour(pal.color(QPalette::Highlight));

  dl->PushClipRect(toIm(plot.topLeft()), toIm(plot.bottomRight()), true);
  if (drawsCellsAsImage(d)) {
    const QRectF grid(in.cellRect(0, 0).topLeft(), in.cellRect(d.rows() - 1, d.columns() - 1).bottomRight());
    if (updateCellTexture(dark)) {
      dl->AddImage(reinterpret_cast<ImTextureID>(static_cast<intptr_t>(cellTexture_)), toIm(grid.topLeft()),
                   toIm(grid.bottomRight()));
    } else {
      const char* msg = "Too many cells for one OpenGL texture on this GPU";
      dl->AddText(toIm(plot.topLeft() + QPointF(8, 8)), textColour, msg);
    }
  } else {
    for (int r = v.firstRow; r <= v.lastRow; ++r) {
      for (int c = v.firstColumn; c <= v.lastColumn; ++c) {
        const float t = in.scale().normalise(d.value(r, c));
        const QRectF cell = in.cellRect(r, c);
        dl->AddRectFilled(toIm(cell.topLeft()), ImVec2(float(cell.right()) - gap, float(cell.bottom()) - gap),
                          std::isnan(t) ? empty : toImColour(rampColour(t)));
      }
    }
  }
  for (int r = v.firstRow; r <= v.lastRow; ++r)
    for (int c = v.firstColumn; c <= v.lastColumn; ++c)
      if (in.isSelected(r, c)) {
        const QRectF cell = in.cellRect(r, c).adjusted(1, 1, -1, -1);
        dl->AddRect(toIm(cell.topLeft()), toIm(cell.bottomRight()), highlight, 0.f, 0, 2.f);
      }
  const QPoint hover = in.hoverCell();
  if (hover.x() >= 0) {
    const QRectF cell = in.cellRect(hover.y(), hover.x());
    dl->AddRect(toIm(cell.topLeft()), toIm(cell.bottomRight()), dark ? IM_COL32_WHITE : IM_COL32_BLACK, 0.f,
                0, 1.5f);
  }
  if (const QRectF band = in.rubberBand(); !band.isEmpty()) {
    dl->AddRectFilled(toIm(band.topLeft()), toIm(band.bottomRight()),
                      toImColour(pal.color(QPalette::Highlight), 50));
    dl->AddRect(toIm(band.topLeft()), toIm(band.bottomRight()), highlight);
  }
  if (in.lasso().size() > 1) {
    ImVector<ImVec2> points;
    for (const QPointF& p : in.lasso()) points.push_back(toIm(p));
    dl->AddPolyline(points.Data, points.Size, highlight, ImDrawFlags_None, 1.5f);
  }
  for (const HeatmapData::Annotation& a : d.annotations) {
    const QByteArray text = a.text.toUtf8();
    const ImVec2 size = ImGui::CalcTextSize(text.constData());
    const QRectF cell = in.cellRect(a.row, a.column);
    const ImVec2 at = a.rightAligned ? ImVec2(float(cell.right()) - 3 - size.x, float(cell.top()) + 2)
                                     : toIm(cell.topLeft() + QPointF(3, 2));
    dl->AddRectFilled(ImVec2(at.x - 2, at.y - 1), ImVec2(at.x + size.x + 2, at.y + size.y + 1),
                      toImColour(pal.color(QPalette::Base), 210), 2.f);
    dl->AddText(at, textColour, text.constData());
  }
  dl->PopClipRect();

  // Labels, thinned out when cells are smaller than the text.
  const float lineH = ImGui::GetTextLineHeight();
  const int rowStride = labelStride(ch, lineH);
  for (int r = v.firstRow; r <= v.lastRow; ++r) {
    if (r % rowStride) continue;
    const QByteArray label = d.rowLabels[r].toUtf8();
    const ImVec2 sz = ImGui::CalcTextSize(label.constData());
    const QRectF cell = in.cellRect(r, 0);
    dl->AddText(ImVec2(float(plot.left()) - 6 - sz.x, float(cell.center().y()) - sz.y / 2), textColour,
                label.constData());
  }
  float widest = 0;
  for (const QString& l : d.columnLabels)
    widest = std::max(widest, ImGui::CalcTextSize(l.toUtf8().constData()).x);
  const int colStride = labelStride(cw, widest + 6);
  for (int c = v.firstColumn; c <= v.lastColumn; ++c) {
    if (c % colStride) continue;
    const QRectF cell = in.cellRect(0, c);
    dl->AddText(ImVec2(float(cell.left()), float(plot.top()) - lineH - 4), textColour,
                d.columnLabels[c].toUtf8().constData());
  }

  // Legend: the colour ramp, its range and the metric.
  const float barX = float(plot.left()), barY = float(height() - HeatmapInteraction::kBottomMargin + 10);
  const float barW = float(std::min(320.0, plot.width())), barH = 12;
  for (int i = 0; i < 8; ++i) {
    const ImU32 a = toImColour(rampColour(i / 8.f)), b = toImColour(rampColour((i + 1) / 8.f));
    dl->AddRectFilledMultiColor(ImVec2(barX + barW * i / 8, barY),
                                ImVec2(barX + barW * (i + 1) / 8, barY + barH), a, b, b, a);
  }
  const ColourScale& s = in.scale();
  auto shown = [&](float x) { return formatValue(s.log ? std::pow(10.f, x) : x).toUtf8(); };
  const QByteArray lo = shown(s.low), hi = shown(s.high);
  dl->AddText(ImVec2(barX, barY + barH + 2), textColour, lo.constData());
  dl->AddText(ImVec2(barX + barW - ImGui::CalcTextSize(hi.constData()).x, barY + barH + 2), textColour,
              hi.constData());
  const QByteArray metric = (d.metric + (s.log ? QStringLiteral(" (log colour)") : QString())).toUtf8();
  dl->AddText(ImVec2(barX + barW + 12, barY), textColour, metric.constData());

  if (hover.x() >= 0) {
    ImGui::BeginTooltip();
    ImGui::TextUnformatted(cellTooltip(d, hover.y(), hover.x()).toUtf8().constData());
    ImGui::EndTooltip();
  }
}

void HeatmapGlCanvas::mousePressEvent(QMouseEvent* e) {
  buttons_ = e->buttons();
  if (interaction_->mousePress(e)) update();
}
void HeatmapGlCanvas::mouseMoveEvent(QMouseEvent* e) {
  buttons_ = e->buttons();
  if (interaction_->mouseMove(e)) update();
}
void HeatmapGlCanvas::mouseReleaseEvent(QMouseEvent* e) {
  buttons_ = e->buttons();
  if (interaction_->mouseRelease(e)) update();
}
void HeatmapGlCanvas::wheelEvent(QWheelEvent* e) {
  if (interaction_->wheel(e)) update();
  e->accept();
}
void HeatmapGlCanvas::leaveEvent(QEvent*) {
  if (interaction_->leave()) update();
}

}  // namespace moewb::gui

#include "heatmap/heatmap_view.h"

namespace moewb::gui {
QString HeatmapView::imguiVersion() {
  return QString::fromLatin1(ImGui::GetVersion());
}
}  // namespace moewb::gui
