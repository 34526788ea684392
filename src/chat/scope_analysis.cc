#include "chat/scope_analysis.h"

#include <algorithm>
#include <set>

namespace kestrel::chat {

int Scope::find(const std::string& name) const {
  for (size_t i = 0; i < slots.size(); ++i) {
    if (slots[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

namespace {

// jinja2's Symbols: the names one scope defines ("refs") and how each is initialised.
class Symbols {
 public:
  struct Ref {
    std::string name;
    SlotInit init;
    const Symbols* alias_owner = nullptr;  // kAlias: the enclosing scope holding the original
  };

  explicit Symbols(const Symbols* parent) : parent_(parent) {}

  // The scope defining `name` (this one or an enclosing one), or nullptr.
  const Symbols* find_owner(const std::string& name) const {
    for (const Symbols* s = this; s != nullptr; s = s->parent_) {
      if (s->find_local(name) != nullptr) return s;
    }
    return nullptr;
  }

  void load(const std::string& name) {
    if (find_owner(name) == nullptr) define(name, SlotInit::kResolve, nullptr);
  }

  void store(const std::string& name) {
    stores_.insert(name);
    if (find_local(name) != nullptr) return;
    const Symbols* outer = parent_ != nullptr ? parent_->find_owner(name) : nullptr;
    define(name, outer != nullptr ? SlotInit::kAlias : SlotInit::kUndefined, outer);
  }

  void declare_parameter(const std::string& name) {
    stores_.insert(name);
    define(name, SlotInit::kParameter, nullptr);
  }

  // After an `if`: merges what its three branches (body, elifs, else) defined. A name any
  // branch stores starts from the enclosing value (or the context), since the branch that
  // assigns it may not run. (jinja2 up to 3.1.2 kept the plain store when all three branches
  // assigned the name; kestrel follows the current jinja2, 3.1.6.)
  void branch_update(const std::vector<Symbols>& branches) {
    std::set<std::string> new_stores;
    for (const Symbols& branch : branches) {
      for (const std::string& name : branch.stores_) {
        if (!stores_.count(name)) new_stores.insert(name);
      }
    }
    for (const Symbols& branch : branches) {
      for (const Ref& ref : branch.refs_) define(ref.name, ref.init, ref.alias_owner);
      stores_.insert(branch.stores_.begin(), branch.stores_.end());
    }
    for (const std::string& name : new_stores) {
      Ref* ref = find_local(name);
      const Symbols* outer = parent_ != nullptr ? parent_->find_owner(name) : nullptr;
      ref->init = outer != nullptr ? SlotInit::kAlias : SlotInit::kResolve;
      ref->alias_owner = outer;
    }
  }

  // Fixes slot numbers; enclosing scopes must be finalised first (they are analysed first).
  std::unique_ptr<Scope> finalize() {
    auto scope = std::make_unique<Scope>();
    for (const Ref& ref : refs_) {
      Slot slot{ref.name, ref.init};
      if (ref.init == SlotInit::kAlias) {
        VarRef where = locate_from(parent_, ref.name, 1);
        slot.alias_depth = where.depth;
        slot.alias_slot = where.slot;
      }
      scope->slots.push_back(std::move(slot));
    }
    final_ = scope.get();
    return scope;
  }

  // Where `name` lives seen from this scope; depth -1 when no scope defines it.
  VarRef locate(const std::string& name) const { return locate_from(this, name, 0); }
  int local_slot(const std::string& name) const { return final_->find(name); }

 private:
  static VarRef locate_from(const Symbols* start, const std::string& name, int depth) {
    for (const Symbols* s = start; s != nullptr; s = s->parent_, ++depth) {
      if (s->final_ != nullptr && s->final_->find(name) >= 0) return {depth, s->final_->find(name)};
    }
    return {};
  }

  Ref* find_local(const std::string& name) {
    for (Ref& ref : refs_) {
      if (ref.name == name) return &ref;
    }
    return nullptr;
  }
  const Ref* find_local(const std::string& name) const { return const_cast<Symbols*>(this)->find_local(name); }

  void define(const std::string& name, SlotInit init, const Symbols* alias_owner) {
    if (Ref* ref = find_local(name)) {
      ref->init = init;
      ref->alias_owner = alias_owner;
    } else {
      refs_.push_back({name, init, alias_owner});
    }
  }

  const Symbols* parent_;
  std::vector<Ref> refs_;
  std::set<std::string> stores_;
  const Scope* final_ = nullptr;
};

// --- pass 1: what a scope defines (jinja2's FrameSymbolVisitor) ------------------------------

void visit_expr(const Expr* e, Symbols& sym) {
  if (e == nullptr) return;
  if (e->kind == ExprKind::kName) sym.load(e->name);
  for (const ExprPtr& child : e->children) visit_expr(child.get(), sym);
  for (const ExprPtr& arg : e->args.positional) visit_expr(arg.get(), sym);
  for (const auto& [name, arg] : e->args.keyword) visit_expr(arg.get(), sym);
  visit_expr(e->args.star.get(), sym);
  visit_expr(e->args.double_star.get(), sym);
}

void visit_stmts(const StmtList& body, Symbols& sym);

// One `if`/`elif` level: jinja2 nests elifs inside the second of three branches.
void visit_if(const Stmt& stmt, size_t branch, Symbols& sym) {
  visit_expr(stmt.exprs[branch].get(), sym);
  std::vector<Symbols> branches(3, sym);
  visit_stmts(stmt.bodies[branch], branches[0]);
  if (branch == 0) {
    for (size_t i = 1; i < stmt.exprs.size(); ++i) visit_if(stmt, i, branches[1]);
    visit_stmts(stmt.bodies.back(), branches[2]);
  }
  sym.branch_update(branches);
}

void visit_stmt(const Stmt& stmt, Symbols& sym) {
  switch (stmt.kind) {
    case StmtKind::kPrint:
    case StmtKind::kCallBlock:
    case StmtKind::kFilterBlock:
      visit_expr(stmt.exprs[0].get(), sym);
      break;
    case StmtKind::kIf: visit_if(stmt, 0, sym); break;
    case StmtKind::kFor: visit_expr(stmt.exprs[0].get(), sym); break;
    case StmtKind::kSet:
      visit_expr(stmt.exprs[0].get(), sym);
      if (!stmt.attribute.empty()) {
        sym.load(stmt.targets[0]);
      } else {
        for (const std::string& t : stmt.targets) sym.store(t);
      }
      break;
    case StmtKind::kSetBlock:
      if (!stmt.attribute.empty()) sym.load(stmt.targets[0]);
      else sym.store(stmt.targets[0]);
      break;
    case StmtKind::kMacro: sym.store(stmt.name); break;
    case StmtKind::kWith:
      for (const ExprPtr& e : stmt.exprs) visit_expr(e.get(), sym);
      break;
    default: break;
  }
}

void visit_stmts(const StmtList& body, Symbols& sym) {
  for (const StmtPtr& stmt : body) visit_stmt(*stmt, sym);
}

// --- pass 2: resolve names, then analyse nested scopes (jinja2's code generation order) -----

void resolve_stmts(StmtList& body, Symbols& sym);

void resolve_expr(Expr* e, const Symbols& sym) {
  if (e == nullptr) return;
  if (e->kind == ExprKind::kName) e->var = sym.locate(e->name);
  for (ExprPtr& child : e->children) resolve_expr(child.get(), sym);
  for (ExprPtr& arg : e->args.positional) resolve_expr(arg.get(), sym);
  for (auto& [name, arg] : e->args.keyword) resolve_expr(arg.get(), sym);
  resolve_expr(e->args.star.get(), sym);
  resolve_expr(e->args.double_star.get(), sym);
}

bool uses_name(const Expr* e, const std::string& name) {
  if (e == nullptr) return false;
  if (e->kind == ExprKind::kName && e->name == name) return true;
  for (const ExprPtr& child : e->children) {
    if (uses_name(child.get(), name)) return true;
  }
  for (const ExprPtr& arg : e->args.positional) {
    if (uses_name(arg.get(), name)) return true;
  }
  for (const auto& [key, arg] : e->args.keyword) {
    if (uses_name(arg.get(), name)) return true;
  }
  return uses_name(e->args.star.get(), name) || uses_name(e->args.double_star.get(), name);
}

bool uses_name(const StmtList& body, const std::string& name) {
  for (const StmtPtr& stmt : body) {
    for (const ExprPtr& e : stmt->exprs) {
      if (uses_name(e.get(), name)) return true;
    }
    for (const ExprPtr& e : stmt->defaults) {
      if (uses_name(e.get(), name)) return true;
    }
    for (const StmtList& inner : stmt->bodies) {
      if (uses_name(inner, name)) return true;
    }
  }
  return false;
}

std::vector<int> local_slots(const Symbols& sym, const std::vector<std::string>& names) {
  std::vector<int> slots;
  for (const std::string& name : names) slots.push_back(sym.local_slot(name));
  return slots;
}

// Macros and call blocks: parameters, defaults, body, then caller/varargs/kwargs if used.
void resolve_macro_scope(Stmt& stmt, Symbols& parent) {
  Symbols sym(&parent);
  for (const std::string& param : stmt.targets) sym.declare_parameter(param);
  for (const ExprPtr& d : stmt.defaults) visit_expr(d.get(), sym);
  visit_stmts(stmt.bodies[0], sym);
  const char* specials[] = {"caller", "varargs", "kwargs"};
  for (const char* special : specials) {
    if (uses_name(stmt.bodies[0], special)) sym.declare_parameter(special);
  }
  stmt.scope = sym.finalize();
  stmt.target_slots = local_slots(sym, stmt.targets);
  stmt.caller_slot = stmt.scope->find("caller");
  stmt.varargs_slot = stmt.scope->find("varargs");
  stmt.kwargs_slot = stmt.scope->find("kwargs");
  for (ExprPtr& d : stmt.defaults) resolve_expr(d.get(), sym);
  resolve_stmts(stmt.bodies[0], sym);
}

struct BodyScope {
  std::unique_ptr<Scope> scope;
  std::vector<int> param_slots;
};

// A nested scope around `body`; `params` are bound by the statement, `extra` is evaluated in it.
BodyScope resolve_body_scope(StmtList& body, const Symbols* parent, const std::vector<std::string>& params,
                             Expr* extra) {
  Symbols sym(parent);
  for (const std::string& p : params) sym.declare_parameter(p);
  visit_stmts(body, sym);
  visit_expr(extra, sym);
  BodyScope out{sym.finalize(), {}};
  out.param_slots = local_slots(sym, params);
  resolve_stmts(body, sym);
  resolve_expr(extra, sym);
  return out;
}

void resolve_for(Stmt& stmt, Symbols& sym) {
  resolve_expr(stmt.exprs[0].get(), sym);
  Symbols body(&sym);
  body.declare_parameter("loop");
  for (const std::string& t : stmt.targets) body.declare_parameter(t);
  visit_stmts(stmt.bodies[0], body);
  stmt.scope = body.finalize();
  stmt.loop_slot = body.local_slot("loop");
  stmt.target_slots = local_slots(body, stmt.targets);
  resolve_stmts(stmt.bodies[0], body);

  stmt.else_scope = resolve_body_scope(stmt.bodies[1], &sym, {}, nullptr).scope;

  if (stmt.exprs[1]) {
    Symbols test(&sym);
    for (const std::string& t : stmt.targets) test.declare_parameter(t);
    visit_expr(stmt.exprs[1].get(), test);
    stmt.test_scope = test.finalize();
    stmt.test_target_slots = local_slots(test, stmt.targets);
    resolve_expr(stmt.exprs[1].get(), test);
  }
}

void resolve_stmt(Stmt& stmt, Symbols& sym) {
  switch (stmt.kind) {
    case StmtKind::kPrint: resolve_expr(stmt.exprs[0].get(), sym); break;
    case StmtKind::kIf:
      for (ExprPtr& cond : stmt.exprs) resolve_expr(cond.get(), sym);
      for (StmtList& body : stmt.bodies) resolve_stmts(body, sym);
      break;
    case StmtKind::kFor: resolve_for(stmt, sym); break;
    case StmtKind::kSet:
      resolve_expr(stmt.exprs[0].get(), sym);
      if (!stmt.attribute.empty()) stmt.namespace_ref = sym.locate(stmt.targets[0]);
      else stmt.target_slots = local_slots(sym, stmt.targets);
      break;
    case StmtKind::kSetBlock:
      if (!stmt.attribute.empty()) stmt.namespace_ref = sym.locate(stmt.targets[0]);
      else stmt.target_slots = local_slots(sym, stmt.targets);
      stmt.scope = resolve_body_scope(stmt.bodies[0], &sym, {}, stmt.exprs[0].get()).scope;
      break;
    case StmtKind::kMacro:
      stmt.name_slot = sym.local_slot(stmt.name);
      resolve_macro_scope(stmt, sym);
      break;
    case StmtKind::kCallBlock:
      resolve_expr(stmt.exprs[0].get(), sym);
      resolve_macro_scope(stmt, sym);
      break;
    case StmtKind::kFilterBlock:
      stmt.scope = resolve_body_scope(stmt.bodies[0], &sym, {}, stmt.exprs[0].get()).scope;
      break;
    case StmtKind::kWith: {
      for (ExprPtr& e : stmt.exprs) resolve_expr(e.get(), sym);
      BodyScope with = resolve_body_scope(stmt.bodies[0], &sym, stmt.targets, nullptr);
      stmt.scope = std::move(with.scope);
      stmt.target_slots = std::move(with.param_slots);
      break;
    }
    case StmtKind::kScope:
      stmt.scope = resolve_body_scope(stmt.bodies[0], &sym, {}, nullptr).scope;
      break;
    default: break;
  }
}

void resolve_stmts(StmtList& body, Symbols& sym) {
  for (StmtPtr& stmt : body) resolve_stmt(*stmt, sym);
}

}  // namespace

std::unique_ptr<Scope> analyze_scopes(StmtList& root) {
  return resolve_body_scope(root, nullptr, {}, nullptr).scope;
}

}  // namespace kestrel::chat
